package relay

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Accepting pauses at a limit rather than accepting and dropping: while
// the server is at its connection limit (Config.MaxConns, or the most
// pairs its descriptors allow, see fdBudget) or a route at its
// Route.MaxConns, the route's accept loops wait for a slot, and new
// clients wait in the kernel's listen backlog, to be served as slots
// free, as HAProxy's maxconn does. Only the per-client limit, which
// needs the client's address, accepts and closes.

// gate wakes the accept loops paused at a limit when a slot frees.
type gate struct {
	mu      sync.Mutex
	wake    chan struct{} // closed, and replaced, when a slot frees
	waiting atomic.Int32  // accept loops paused
}

// slotFreed wakes the paused accept loops, if any: one atomic load when
// none is paused.
func (s *Server) slotFreed() {
	if s.gate.waiting.Load() == 0 {
		return
	}
	s.gate.mu.Lock()
	close(s.gate.wake)
	s.gate.wake = make(chan struct{})
	s.gate.mu.Unlock()
}

// unadmit gives back a slot admit took, waking accept loops paused at a
// limit.
func (rt *route) unadmit() {
	rt.srv.active.Add(-1)
	rt.active.Add(-1)
	rt.srv.slotFreed()
}

// admit takes a slot under the global and per-route limits.
func (rt *route) admit(r *Route) bool {
	s := rt.srv
	n := s.active.Add(1)
	m := rt.active.Add(1)
	if lim := s.limit(); (lim > 0 && n > lim) || (r.MaxConns > 0 && m > int64(r.MaxConns)) {
		s.active.Add(-1)
		rt.active.Add(-1)
		return false
	}
	return true
}

// releaseSlots gives back a connection's slots under the global and
// route limits (waking accept loops paused there) and, if perClient,
// ip's under the per-client limit.
func (rt *route) releaseSlots(perClient bool, ip netip.Addr) {
	rt.unadmit()
	if perClient {
		rt.clientMu.Lock()
		if rt.clients[ip]--; rt.clients[ip] <= 0 {
			delete(rt.clients, ip)
		}
		rt.clientMu.Unlock()
	}
}

// takeClient takes a slot for ip under r's per-client limit, if r has
// one. It reports whether ip may connect, and whether a slot was taken.
func (rt *route) takeClient(r *Route, ip netip.Addr) (ok, took bool) {
	if r.MaxConnsPerClient <= 0 || !ip.IsValid() {
		return true, false
	}
	rt.clientMu.Lock()
	defer rt.clientMu.Unlock()
	if rt.clients[ip] >= r.MaxConnsPerClient {
		return false, false
	}
	rt.clients[ip]++
	return true, true
}

// waitRoom waits while accepting on f would go over a limit: the
// server's, and the route's when f has a single route (with several,
// the route is known only after the hello: waitTake waits for it). It
// returns false when f stops first. A route replaced by a reload wakes
// it to look again.
func (f *front) waitRoom() bool {
	s := f.srv
	for {
		rt, ok := f.room()
		if ok {
			return true
		}
		var rdone <-chan struct{}
		if rt != nil {
			rdone = rt.done
		}
		if !s.pause(rt, f.done, rdone) {
			return false
		}
	}
}

// room reports whether f may accept a client now, and the route whose
// limit applies: f's only route, or nil when a hello chooses the route
// (then only the server's limit applies until it has).
func (f *front) room() (*route, bool) {
	var rt *route
	if t := f.table.Load(); !t.needsHello() {
		rt = t.only()
	}
	return rt, !f.srv.atLimit(rt)
}

// pause waits, once the limits are still full, for a slot to free, done
// (false) or rdone (true: look again). rt, if not nil, is the route
// whose accepting pauses, for its log and counters.
func (s *Server) pause(rt *route, done, rdone <-chan struct{}) bool {
	s.gate.mu.Lock()
	wake := s.gate.wake
	s.gate.waiting.Add(1)
	s.gate.mu.Unlock()
	defer s.gate.waiting.Add(-1)
	// A slot freed before waiting was counted woke nobody: look again.
	if !s.atLimit(rt) {
		return true
	}
	if rt != nil {
		rt.pausing()
		start := mono()
		rt.st.pauses.begin(start)
		defer rt.st.pauses.end(start)
	}
	select {
	case <-wake:
	case <-rdone:
	case <-done:
		return false
	}
	return true
}

// atLimit reports whether a new stream would go over the server's limit
// or, if rt is not nil, rt's. Clients accepted and waiting for a slot
// (Server.pending, load.parked) count against the limits they wait
// under: each holds a descriptor already, and a slot that frees is
// theirs, not a new client's.
func (s *Server) atLimit(rt *route) bool {
	if lim := s.limit(); lim > 0 && s.active.Load()+s.pending.Load() >= lim {
		return true
	}
	if rt == nil {
		return false
	}
	rlim := int64(rt.cfg.Load().MaxConns)
	return rlim > 0 && rt.active.Load()+rt.parked.Load() >= rlim
}

// A client of a front whose routes its ClientHello tells apart holds a
// slot under the server's limit (and so its descriptor budget) from its
// accept: a client that stalls in its hello holds a descriptor as much
// as one relayed, and without the slot any number of them would get past
// the accept pause. The route its hello chooses then takes the slot over
// (admitHeld), or it is given back (unpeek).

// admitPeek takes a slot under the server's limit for a client whose
// route its hello will choose.
func (s *Server) admitPeek() bool {
	n := s.active.Add(1)
	if lim := s.limit(); lim > 0 && n > lim {
		s.active.Add(-1)
		return false
	}
	return true
}

// unpeek gives back a slot admitPeek took, for a client no route took.
func (s *Server) unpeek() {
	s.active.Add(-1)
	s.slotFreed()
}

// admitHeld takes a slot under rt's own limit for a client that holds
// one under the server's (admitPeek's): on success the route owns both,
// and releaseSlots gives them back together.
func (rt *route) admitHeld(r *Route) bool {
	if m := rt.active.Add(1); r.MaxConns > 0 && m > int64(r.MaxConns) {
		rt.active.Add(-1)
		return false
	}
	return true
}

// pausing logs that the route's accepting paused at a limit: once when a
// pause begins after 10 s without one, then a count every 30 s while
// pauses go on, never a line per connection.
func (rt *route) pausing() {
	switch begins, n := rt.pauseLog.note(); {
	case begins:
		rt.srv.log.Warn("accepting paused at the connection limit; clients wait in the listen backlog",
			"route", rt.name, "limit", rt.srv.limit(), "route_limit", rt.cfg.Load().MaxConns)
	case n > 0:
		rt.srv.log.Warn("accepting still pausing at the connection limit", "route", rt.name, "pauses", n)
	}
}

// pauseLog paces the lines of something that may happen on every
// connection (pausing, a bad PROXY header): a line when it begins after
// 10 s without, then a count every 30 s while it goes on.
type pauseLog struct {
	mu           sync.Mutex
	last, logged time.Time
	count        int
}

// note records one occurrence. It reports whether an episode begins,
// to be logged in full, or else how many occurrences to log as a count
// now (0: none).
func (p *pauseLog) note() (begins bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.count++
	switch {
	case now.Sub(p.last) > 10*time.Second:
		begins, p.count, p.logged = true, 0, now
	case now.Sub(p.logged) > 30*time.Second:
		n, p.count, p.logged = p.count, 0, now
	}
	p.last = now
	return begins, n
}

// limit is the server's connection limit in force: Config.MaxConns or
// the descriptor budget, whichever is smaller; 0 is none.
func (s *Server) limit() int64 {
	lim, b := s.maxConns.Load(), s.fdBudget.Load()
	if b > 0 && (lim <= 0 || b < lim) {
		return b
	}
	return lim
}

// backoff paces an accept loop through errors that repeat until
// something frees (out of descriptors or memory): 5 ms doubling to 1 s,
// as net/http's Server.Serve, and logged once when the errors begin, as
// a count every 30 s while they go on, and once when they end. A
// success does not reset the delay while errors keep coming: with one
// descriptor free, every other accept succeeds.
type backoff struct {
	listen         string
	delay          time.Duration
	failing        bool
	count          int
	since, lastErr time.Time
	logged         time.Time
}

// failed records an error and returns how long to wait.
func (b *backoff) failed(log *slog.Logger, err error) time.Duration {
	now := time.Now()
	b.count++
	switch {
	case !b.failing:
		b.failing, b.since, b.logged, b.count = true, now, now, 1
		b.delay = 5 * time.Millisecond
		log.Warn("accept failing; backing off", "listen", b.listen, "err", err)
	case now.Sub(b.logged) > 30*time.Second:
		log.Warn("accept still failing", "listen", b.listen, "errors", b.count, "err", err)
		b.logged = now
		fallthrough
	default:
		b.delay = min(2*b.delay, time.Second)
	}
	b.lastErr = now
	return b.delay
}

// ok records a success: the errors ended once none came for a second.
func (b *backoff) ok(log *slog.Logger) {
	if b.failing && time.Since(b.lastErr) > time.Second {
		log.Info("accept recovered", "listen", b.listen, "errors", b.count, "after", time.Since(b.since).Round(time.Millisecond))
		*b = backoff{listen: b.listen}
	}
}

// acceptEach accepts on ln with package net's Accept until ln closes or
// f stops, and gives each client to serve. Before each accept, room (if
// not nil) waits while the limits are full (false: f stopped). Errors
// are paced by a backoff: out of descriptors (EMFILE, ENFILE) or memory,
// every retry fails the same way until a connection closes.
func (f *front) acceptEach(ln net.Listener, room func() bool, serve func(net.Conn)) {
	log := f.srv.log
	bo := backoff{listen: ln.Addr().String()}
	for {
		if room != nil && !room() {
			return
		}
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			f.acceptFailed()
			select {
			case <-time.After(bo.failed(log, err)):
			case <-f.done:
				return
			}
			continue
		}
		bo.ok(log)
		serve(c)
	}
}

// exhausted reports whether err is a lack of descriptors or memory: not
// a target's fault, and gone once something closes.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Each relayed stream holds two sockets, and now and then a splice pipe
// (two more descriptors, while bytes are in flight; a copy that cannot
// get one copies through a buffer instead). The budget counts three per
// pair and keeps fdReserve back for listeners, health checks, the
// metrics and pprof servers, log files and reloads.
const (
	fdsPerPair = 3
	fdReserve  = 32
)

// fdBudget is the most stream relays the descriptor limit allows for
// routes, 0 if no limit is known. UDP sessions (one socket each, up to
// Route.MaxSessions) are not in it.
func fdBudget(routes []Route) int64 {
	lim := descriptorLimit()
	if lim == 0 {
		return 0
	}
	reserve := int64(fdReserve)
	for _, r := range routes {
		reserve += int64(r.Workers)
	}
	return max((lim-reserve)/fdsPerPair, 1)
}
