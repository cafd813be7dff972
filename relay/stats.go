package relay

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// counters are a route's live counters.
type counters struct {
	accepted, relayed, denied, overLimit         atomic.Uint64
	bytesUp, bytesDown                           atomic.Uint64
	errAccept, errDial, errProxy, errCopy        atomic.Uint64
	idleTimeouts                                 atomic.Uint64
	pauses                                       pauseTime
	udpSessions, udpSessionsTotal                atomic.Int64
	udpPacketsUp, udpPacketsDown                 atomic.Uint64
	udpDropLimit, udpDropWrite, udpDropTruncated atomic.Uint64
	udpMoved, udpStale                           atomic.Uint64
	rateCounters
}

// RouteStats is a snapshot of one route's counters. Up is client to
// target, Down is target to client.
type RouteStats struct {
	Name, Listen, Target string

	Accepted  uint64 // stream connections accepted
	Active    int64  // stream relays in progress (including dialing)
	Relayed   uint64 // stream relays completed
	Denied    uint64 // refused by Allow/Deny or TrustedProxies
	OverLimit uint64 // refused by MaxConns, MaxConnsPerClient or the global limit

	BytesUp, BytesDown uint64

	// Errors by kind.
	AcceptErrors, DialErrors, ProxyHeaderErrors, CopyErrors, IdleTimeouts uint64

	// Paused is the time the route's accept loops spent waiting at a
	// connection limit or the descriptor budget, summed over its
	// listeners, and AcceptPaused whether one waits now. Waits end as
	// slots free.
	Paused       time.Duration
	AcceptPaused bool

	// The rate limits: stream clients closed over ConnRatePerClient,
	// UDP datagrams dropped that would have started a session over it,
	// bytes moved by directions with a byte rate and the time they
	// waited for it, streams (UDP: sessions) ended at MaxDuration, and
	// UDP datagrams dropped beyond a paced session's queue.
	RateLimited      uint64
	DropsSessionRate uint64
	PacedBytes       uint64
	PacedTime        time.Duration
	MaxDurationEnds  uint64
	DropsPaced       uint64

	// UDP.
	Sessions, SessionsTotal int64
	PacketsUp, PacketsDown  uint64
	DropsSessionLimit       uint64 // datagrams from new clients over MaxSessions
	DropsWriteError         uint64 // datagrams not sent: the kernel refused them, or no upstream socket could take them (failed, or the route closing)
	DropsTruncated          uint64 // datagrams longer than the receive buffer
	SessionsMoved           uint64 // sessions that followed their QUIC connection ID to a new client address
	SessionsStale           uint64 // sessions ended because a new QUIC connection came from their client's address

	// Targets are the route's targets, in the order configured.
	Targets []TargetStats
}

// TargetStats is a snapshot of one target's state and counters. A target
// a reload keeps keeps its counters; bytes are counted as each connection
// ends.
type TargetStats struct {
	// Addr names the target: its URL, or for a backend discovered from
	// DNS, the dynamic target's URL, a slash and the backend's address
	// (srv+tcp://_svc._tcp.example.com/192.0.2.7:8080).
	Addr string
	// From is the dynamic target a discovered backend comes from, ""
	// for a configured target; Priority is its SRV priority.
	From     string
	Priority int
	Weight   int   // in force: the configured one, or one set at run time
	Up       bool  // not marked down by a failed dial or health checks
	Active   int64 // connections (UDP sessions) relayed to it now
	// Draining: the route no longer has the target (a reload or a DNS
	// answer dropped it), and it takes no new client while its
	// connections go on; its Weight is 0. Listed until they end.
	Draining bool
	// State is what an operator set at run time (Server.SetTargetState):
	// enabled unless drained or disabled.
	State TargetState

	Connections, DialErrors uint64
	BytesUp, BytesDown      uint64
}

// Stats is a snapshot of a Server's counters.
type Stats struct {
	// Active counts the slots taken under Config.MaxConns: stream
	// relays in progress over all routes, and clients still sending the
	// ClientHello that chooses their route.
	Active int64
	Routes []RouteStats
	// Fronts are the stream listen addresses, and the UDP ones shared by
	// routes, sorted by Listen, with the clients turned away (or, on a
	// UDP address, not routed by a QUIC ClientHello) before a route was
	// chosen.
	Fronts []FrontStats
	// Loops are the connections each loop of the event engine serves, or
	// was handed and is about to: each new connection goes to the loop
	// with the fewest. Empty on the goroutine engine, and until the
	// loops start with the first stream listener.
	Loops []int64
}

// Stats returns the current counters, routes sorted by name. Counters of
// a route removed by [Server.Update] are dropped with it.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Active: s.active.Load()}
	if le, ok := s.eng.(loopEngine); ok {
		st.Loops = le.loopLoads()
	}
	for _, rt := range s.routes {
		c := &rt.st
		r := rt.cfg.Load()
		ts := rt.targets()
		paused, pausedNow := c.pauses.total()
		st.Routes = append(st.Routes, RouteStats{
			Name: rt.name, Listen: r.Listen.String(), Target: ts.String(), Targets: ts.stats(),
			Accepted: c.accepted.Load(), Active: rt.active.Load(), Relayed: c.relayed.Load(),
			Denied: c.denied.Load(), OverLimit: c.overLimit.Load(),
			BytesUp: c.bytesUp.Load(), BytesDown: c.bytesDown.Load(),
			AcceptErrors: c.errAccept.Load(), DialErrors: c.errDial.Load(),
			ProxyHeaderErrors: c.errProxy.Load(), CopyErrors: c.errCopy.Load(),
			IdleTimeouts: c.idleTimeouts.Load(), Paused: paused, AcceptPaused: pausedNow,
			Sessions: c.udpSessions.Load(), SessionsTotal: c.udpSessionsTotal.Load(),
			PacketsUp: c.udpPacketsUp.Load(), PacketsDown: c.udpPacketsDown.Load(),
			DropsSessionLimit: c.udpDropLimit.Load(), DropsWriteError: c.udpDropWrite.Load(),
			DropsTruncated: c.udpDropTruncated.Load(), SessionsMoved: c.udpMoved.Load(),
			SessionsStale: c.udpStale.Load(),
			RateLimited:   c.rateLimited.Load(), PacedBytes: c.pacedBytes.Load(),
			PacedTime: time.Duration(c.pacedNanos.Load()), MaxDurationEnds: c.maxDurations.Load(),
			DropsPaced: c.pacedDrops.Load(), DropsSessionRate: c.udpRateLimited.Load(),
		})
	}
	slices.SortFunc(st.Routes, func(a, b RouteStats) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range s.fronts {
		if f.table.Load() != nil {
			st.Fronts = append(st.Fronts, f.stats())
		}
	}
	for _, f := range s.udpFronts {
		st.Fronts = append(st.Fronts, f.stats())
	}
	slices.SortFunc(st.Fronts, func(a, b FrontStats) int { return strings.Compare(a.Listen, b.Listen) })
	return st
}

func (ts *targetSet) stats() []TargetStats {
	out := make([]TargetStats, 0, len(ts.bs)+len(ts.gone))
	var now int64
	for i, b := range ts.bs {
		st := b.stats(&now)
		st.Weight = ts.weight(i)
		if ts.prio != nil {
			st.Priority = int(ts.prio[i])
		}
		out = append(out, st)
	}
	for _, b := range ts.gone {
		if b.active.Load() > 0 {
			st := b.stats(&now)
			st.Draining = true
			out = append(out, st)
		}
	}
	return out
}

// stats is b's state and counters, but for what its set gives it.
func (b *backend) stats(now *int64) TargetStats {
	st := TargetStats{
		Addr: b.name, Up: !b.isDown(now), Active: b.active.Load(), State: TargetState(b.admin.state.Load()),
		Connections: b.conns.Load(), DialErrors: b.dialFails.Load(),
		BytesUp: b.bytesUp.Load(), BytesDown: b.bytesDown.Load(),
	}
	if b.from.Network != "" {
		st.From = b.from.String()
	}
	return st
}

// pauseTime sums the time a route's accept loops wait at a limit,
// including the waits still going on: a route held at its limit for an
// hour must show that hour as it passes, not when the wait ends. Waits
// begin and end once per pause, not per connection: a mutex keeps the
// sum, the number waiting and their start times consistent for total.
type pauseTime struct {
	mu     sync.Mutex
	ended  time.Duration // waits that ended
	n      int64         // waits going on
	starts int64         // sum of their start times, on mono
}

// base is the origin of mono.
var base = time.Now()

// mono is the relay's clock: monotonic nanoseconds since base. The event
// loops keep their time on it, and pauseTime its starts.
func mono() int64 { return int64(time.Since(base)) }

// begin records a wait beginning at start (mono).
func (p *pauseTime) begin(start int64) {
	p.mu.Lock()
	p.n++
	p.starts += start
	p.mu.Unlock()
}

// end records that the wait begun at start ends.
func (p *pauseTime) end(start int64) {
	now := mono()
	p.mu.Lock()
	p.n--
	p.starts -= start
	p.ended += time.Duration(now - start)
	p.mu.Unlock()
}

// total returns the time waited, the waits going on up to now included,
// and whether one goes on.
func (p *pauseTime) total() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended + time.Duration(p.n*mono()-p.starts), p.n > 0
}
