package relay

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"
)

// TakeOver starts a server with cfg from what HandOver sends on c. cfg
// must name the same routes' listen addresses (routes and targets may
// otherwise differ, as on a reload: streams whose route or target is
// gone keep running with what they had, as on Update). On error nothing
// is started, and the sender goes on.
//
// The Server returned is started: do not call Start. The sockets are
// matched to cfg's routes as [Server.Inherit] matches them, each named
// after a route of the sender that used it: a socket no route of cfg uses
// fails the take-over (its queued clients would be lost), and a route
// whose listen address the sender did not serve binds it as Start does.
func TakeOver(cfg Config, c *net.UnixConn) (*Server, error) {
	defer c.SetDeadline(time.Time{})
	s, err := New(cfg)
	var in *taken
	if err == nil {
		in, err = receive(c)
	}
	if err == nil {
		err = s.startTaken(in)
	}
	if err != nil {
		in.close()
		abortPeer(c, err)
		return nil, fmt.Errorf("relay: take-over failed: %w", err)
	}
	if err := confirm(c); err != nil {
		s.abandon()
		in.close()
		return nil, fmt.Errorf("relay: take-over failed: %w", err)
	}
	s.serveTaken(in)
	return s, nil
}

// confirm tells the sender that everything is built, waits for its
// commit and acknowledges it.
func confirm(c *net.UnixConn) error {
	c.SetDeadline(time.Now().Add(handOverStep))
	if err := writeFrame(c, frReady, nil, nil); err != nil {
		return err
	}
	if err := expect(c, frCommit); err != nil {
		return err
	}
	c.SetWriteDeadline(time.Now().Add(handOverStep))
	return writeFrame(c, frDone, nil, nil)
}

// taken is what a receiver got: listening sockets, for Server.Inherit,
// each named after a route that used it.
type taken struct {
	files    []*os.File
	names    []string
	streams  []*takenStream
	sessions []*takenSession
}

// takenStream is a stream a hand-over brought, with its descriptors and,
// once the sender let go, what it maps to here (resolveTaken).
type takenStream struct {
	rec streamRec
	fds []int
	rt  *route   // its route; for a relaying stream whose route is gone, a detached one
	b   *backend // a relaying stream's target
	f   *front   // a prelude's front, found by a route of the sender's
}

// receive reads a hand-over's state up to its frEnd frame.
func receive(c *net.UnixConn) (*taken, error) {
	in := &taken{}
	records, fds := 0, 0
	deadline := time.Now().Add(handOverStep)
	for {
		c.SetReadDeadline(deadline)
		h, p, got, err := readFrame(c)
		if err != nil {
			return in, err
		}
		switch h.typ {
		case frParts:
			n, err := in.parts(p, got)
			if err != nil {
				return in, err
			}
			records += n
			fds += len(got)
		case frEnd:
			wantRecs, wantFDs, err := decodeEnd(p)
			if err == nil && (wantRecs != records || wantFDs != fds) {
				err = fmt.Errorf("%w: %d records and %d descriptors sent, %d and %d received", errBadFrame, wantRecs, wantFDs, records, fds)
			}
			return in, err
		case frAbort:
			return in, fmt.Errorf("peer gave up: %s", p)
		default:
			return in, fmt.Errorf("%w: type %d in the state", errBadFrame, h.typ)
		}
	}
}

// parts takes the records of a frParts frame and its descriptors, every
// one of which it closes or keeps, and returns how many records it held.
func (in *taken) parts(p []byte, fds []int) (int, error) {
	rs, err := splitRecords(p, len(fds))
	for i := range rs {
		if err != nil {
			break
		}
		r := &rs[i]
		own := fds[r.fd0 : r.fd0+r.nfd]
		switch r.kind {
		case recListener:
			err = in.listener(r.body, own)
		case recStream:
			var rec streamRec
			if rec, err = decodeStream(r.body, r.nfd); err == nil {
				in.streams = append(in.streams, &takenStream{rec: rec, fds: slices.Clone(own)})
			}
		case recSession:
			var rec sessionRec
			if rec, err = decodeSession(r.body, r.nfd); err == nil {
				in.sessions = append(in.sessions, &takenSession{rec: rec, fd: own[0]})
			}
		default:
			err = fmt.Errorf("%w: record kind %d", errBadFrame, r.kind)
		}
		for j := range own {
			own[j] = -1 // kept, or closed by the step that failed
		}
	}
	closeFDs(fds)
	return len(rs), err
}

// listener takes a recListener's sockets.
func (in *taken) listener(body []byte, fds []int) error {
	r, err := decodeListener(body)
	if err != nil {
		closeFDs(fds)
		return err
	}
	for _, fd := range fds {
		in.files = append(in.files, os.NewFile(uintptr(fd), "hand-over "+r.name))
		in.names = append(in.names, r.name)
	}
	return nil
}

// close closes what no Server took.
func (in *taken) close() {
	if in == nil {
		return
	}
	for _, f := range in.files {
		f.Close()
	}
	for _, t := range in.streams {
		closeFDs(t.fds)
	}
	for _, t := range in.sessions {
		closeFDs([]int{t.fd})
	}
	in.files, in.names, in.streams, in.sessions = nil, nil, nil, nil
}

// startTaken starts s on the listening sockets of in, serving nothing
// until serveTaken.
func (s *Server) startTaken(in *taken) error {
	if _, ok := s.eng.(streamMover); !ok && len(in.streams) > 0 {
		return fmt.Errorf("the %s engine cannot take established streams over: run the %s engine", EngineGoroutine, EngineEvent)
	}
	if err := s.Inherit(in.files, in.names); err != nil {
		return err
	}
	in.files, in.names = nil, nil // s's now
	s.mu.Lock()
	s.held = new([]func())
	s.mu.Unlock()
	if err := s.Start(); err != nil {
		s.abandon()
		return err
	}
	return nil
}

// serveTaken starts serving what startTaken built, once the sender let
// go: the accept loops and UDP readers held back, and the Unix socket
// files that are now s's.
func (s *Server) serveTaken(in *taken) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := *s.held
	s.held = nil
	for _, f := range s.fronts {
		for _, ln := range f.lns {
			setUnlink(ln, true)
		}
	}
	for _, rt := range s.routes {
		if rt.udp != nil {
			rt.udp.foreign.Store(false)
		}
	}
	for _, f := range s.udpFronts {
		f.sock.udp.foreign.Store(false)
	}
	for _, t := range in.sessions { // before the readers, which would open others
		s.adoptSession(t)
	}
	in.sessions = nil
	for _, fn := range held {
		fn()
	}
	n := len(in.streams)
	if n > 0 {
		ghosts := map[string]*route{}
		for _, t := range in.streams {
			s.resolveTaken(t, ghosts)
		}
		s.eng.(streamMover).adoptStreams(in.streams)
		in.streams = nil
	}
	s.log.Info("took over from another process", "streams", n)
}

// resolveTaken finds what t maps to here: its route, by name, and its
// target among the route's (as Update keeps them), or for a relaying
// stream whose route or target is gone, detached ones that only count
// it, as a reload leaves a removed route's streams; for a prelude, the
// front of a route of the sender's front. s.mu is held.
func (s *Server) resolveTaken(t *takenStream, ghosts map[string]*route) {
	if rt := s.routes[t.rec.route]; rt != nil && rt.udp == nil {
		t.rt = rt
	}
	if !t.rec.relaying {
		if rt := s.routes[t.rec.front]; rt != nil {
			t.f = rt.front
		}
		return
	}
	if t.rt == nil {
		if t.rt = ghosts[t.rec.route]; t.rt == nil {
			t.rt = newRoute(s, Route{Name: t.rec.route, Listen: Addr{Network: "tcp"}}, nil)
			close(t.rt.done)
			ghosts[t.rec.route] = t.rt
		}
	}
	// Its slots are taken now, before any prelude's looks for one.
	t.rt.holdSlots(t.rec.perClient, t.rec.src.Addr())
	t.b = backendOf(t.rt, t.rec.target)
}

// holdSlots counts a stream that comes relaying against rt's limits and
// the server's, whatever they say, as a reload that lowers them leaves
// the streams under way.
func (rt *route) holdSlots(perClient bool, ip netip.Addr) {
	rt.srv.active.Add(1)
	rt.active.Add(1)
	if perClient {
		rt.clientMu.Lock()
		rt.clients[ip]++
		rt.clientMu.Unlock()
	}
}

// abandon closes what TakeOver built and never served, leaving the
// sockets' queues to the sender.
func (s *Server) abandon() {
	s.mu.Lock()
	s.held = nil
	s.closeKept()
	s.mu.Unlock()
	s.Close()
}
