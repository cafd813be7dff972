package relay

import (
	"fmt"
	"net"
	"runtime"
)

// engine moves the bytes of a Server's stream routes. Every engine drives
// the same lifecycle (stream: admit and release, access lists, the PROXY
// header in and out, the hello's route choice, the dial plan, the end and
// its counters); what differs is how connections wait, goroutines in the
// netpoller or event loops of the engine's own, and how bytes move.
type engine interface {
	// adopt takes stream listeners just opened (listenStreamAt) into the
	// form serve takes; on an error it has closed them.
	adopt(lns []net.Listener) ([]net.Listener, error)
	// serve accepts on ln, one of f's stream listeners, pausing while
	// front.room says the limits are full, and relays every admitted
	// connection until f stops or ln closes, taking the stream's steps
	// (stream.go) for each. For each client it reads f.table: if the
	// table needsHello, it reads the client's first bytes (after a PROXY
	// header, if the front takes one) into a bounded buffer until
	// tlshello.Parse answers or the peek timeout, chooses the route
	// (stream.chose), and writes those bytes to the target before
	// relaying; otherwise the table's only route takes the client with no
	// byte read. It runs on a goroutine counted in the Server's serveWG,
	// and calls Done on it when it no longer accepts.
	serve(f *front, ln net.Listener)
	// serveQueued relays c, taken from the accept queue of one of f's
	// listeners as it stopped (Update), as if serve had accepted it.
	serveQueued(f *front, c net.Conn)
	// abort ends every connection in flight, dials and PROXY header reads
	// included, with why as the cause. The Server's mu is held.
	abort(why error)
	// close releases what the engine holds, after Shutdown saw every
	// connection end. It may be called more than once.
	close()
	// streams describes the engine's streams whose ID is above after,
	// at now (mono): at least the first limit by ID (all if limit is 0
	// or less), maybe more.
	streams(after uint64, limit int, now int64) []StreamInfo
	// closeStream ends stream id with errAdminClose, if it is in flight.
	closeStream(id uint64) bool
}

// loopEngine is an engine that relays from event loops of its own; Stats
// reports their loads.
type loopEngine interface {
	// loopLoads reports the connections each event loop serves or is
	// about to (Stats.Loops).
	loopLoads() []int64
}

// Engine names for [Config].Engine.
const (
	// EngineGoroutine relays each connection on goroutines of its own
	// that wait in Go's netpoller; it runs on every platform.
	EngineGoroutine = "goroutine"
	// EngineEvent relays every connection from a few event loops (one
	// per CPU) with no goroutine per connection: Linux only.
	EngineEvent = "event"
)

// engineNames lists the engines this platform can run, the default first.
func engineNames() []string { return availableEngines }

// checkEngine reports whether name is an engine this platform runs.
func checkEngine(name string) error {
	if name == "" {
		return nil
	}
	for _, n := range availableEngines {
		if n == name {
			return nil
		}
	}
	switch name {
	case EngineGoroutine, EngineEvent:
		return fmt.Errorf("engine %q is not supported on %s", name, runtime.GOOS)
	}
	return fmt.Errorf("unknown engine %q: want %q or %q", name, EngineEvent, EngineGoroutine)
}

// newEngine returns the engine named (checked by checkEngine), or for ""
// the platform's default.
func newEngine(s *Server, name string) engine {
	if name == "" {
		name = availableEngines[0]
	}
	return newPlatformEngine(s, name)
}
