package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrServerClosed is returned by [Server.Start] and [Server.Update] after
// [Server.Shutdown] or [Server.Close].
var ErrServerClosed = errors.New("relay: server closed")

// Server runs a set of routes. Its methods are safe for concurrent use.
type Server struct {
	log      *slog.Logger
	connLog  slog.Level
	ports    atomic.Pointer[[]netip.AddrPort] // stream listeners, for dialsSelf
	maxConns atomic.Int64
	active   atomic.Int64 // stream relays in progress, all routes

	updateMu sync.Mutex // one Update at a time, resolving targets unlocked

	mu      sync.Mutex
	started bool
	closed  bool
	routes  map[string]*route
	eng     engine
	connWG  sync.WaitGroup // one per relayed or pending stream connection
	serveWG sync.WaitGroup // accept loops and UDP readers
}

// New validates cfg and returns a Server that has not opened anything yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	s := &Server{log: cfg.Logger, routes: map[string]*route{}, connLog: slog.LevelDebug}
	if cfg.ConnLog != nil {
		s.connLog = cfg.ConnLog.Level()
	}
	s.eng = newEngine(s, cfg.Engine)
	s.ports.Store(new([]netip.AddrPort))
	s.maxConns.Store(int64(cfg.MaxConns))
	for i := range cfg.Routes {
		rt := newRoute(s, cfg.Routes[i], nil)
		s.routes[rt.name] = rt
	}
	return s, nil
}

// Start binds every route's listeners and starts serving them in the
// background: one goroutine per listener, plus one per relayed connection
// or UDP session. If any bind fails (an address in use), Start closes what
// it opened and returns the error; it may be called again.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrServerClosed
	}
	if s.started {
		return errors.New("relay: Start called twice")
	}
	var opened []*route
	for _, name := range s.sortedNames() {
		rt := s.routes[name]
		if err := rt.open(); err != nil {
			// Close what was opened, and put fresh routes in their
			// place, so that a later Start (after the address is
			// freed) opens them anew.
			for _, o := range opened {
				o.stop()
				s.routes[o.name] = newRoute(s, *o.cfg.Load(), o.load)
			}
			return err
		}
		opened = append(opened, rt)
	}
	for _, rt := range opened {
		rt.serve()
	}
	s.started = true
	s.updatePorts()
	return nil
}

func (s *Server) sortedNames() []string {
	names := make([]string, 0, len(s.routes))
	for n := range s.routes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Update applies a new configuration, as on SIGHUP: routes that are gone
// stop listening, new ones start, and changed ones take their new settings
// for new connections (rebinding only if the listen address or worker
// count changed). Established stream connections are never touched: they
// finish under the settings they started with, and those of a rebound
// route still count against its limits. A UDP route's new target likewise
// takes new sessions while those under way keep theirs, but the sessions
// of a removed or rebound route end with it, since their replies leave
// through its socket (the datagrams queued on it are relayed first). On a
// bind error, or a UDP route's new target that
// does not resolve, the routes already applied stay applied, a route that
// failed goes on with its old settings (listening again where it was, if
// it was to rebind), and the error names it.
//
// On Linux, connections that a stopped stream listener had in its accept
// queue (their handshake done, not yet accepted) are accepted and relayed
// under the old settings rather than reset by the close. Clients that
// connect to an address while its route rebinds are refused.
func (s *Server) Update(cfg Config) error {
	cfg, err := cfg.normalize()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	targets := s.resolveUDPTargets(cfg)
	s.mu.Lock()
	drained, err := s.update(cfg, targets)
	s.updatePorts()
	if len(drained) > 0 {
		// Like an accept loop's: Shutdown waits for these connections
		// to be handed over before it waits for the relays.
		s.serveWG.Add(1)
	}
	s.mu.Unlock()
	if len(drained) > 0 {
		for _, d := range drained { // the engine takes s.mu
			s.eng.handoff(d.rt, d.c)
		}
		s.serveWG.Done()
	}
	return err
}

// handoff is a connection taken from the accept queue of a route's
// listener as it stopped.
type handoff struct {
	rt *route
	c  net.Conn
}

// update is Update under s.mu. It returns the connections queued on the
// stream listeners it stopped, for Update to serve once s.mu is free.
func (s *Server) update(cfg Config, targets map[string]*resolved) ([]handoff, error) {
	if s.closed {
		return nil, ErrServerClosed
	}
	var queue []handoff
	s.maxConns.Store(int64(cfg.MaxConns))
	want := map[string]Route{}
	for _, r := range cfg.Routes {
		want[r.Name] = r
	}
	// Stop first, so a route that moves to a freed address can bind it.
	var errs []error
	rebound := map[string]*route{}
	for name, rt := range s.routes {
		r, ok := want[name]
		cur := rt.cfg.Load()
		switch {
		case !ok:
			s.log.Info("route removed", "route", name)
			rt.targets().close()
		case r.Listen != cur.Listen || r.Workers != cur.Workers || r.UnixMode != cur.UnixMode ||
			r.UnixUser != cur.UnixUser || r.UnixGroup != cur.UnixGroup:
			s.log.Info("route rebinding", "route", name, "listen", r.Listen.String())
			rebound[name] = rt
		default:
			if err := rt.update(r, targets[name]); err != nil {
				errs = append(errs, err)
			}
			delete(want, name)
			continue
		}
		for _, ln := range rt.lns {
			for _, c := range queued(ln) {
				queue = append(queue, handoff{rt, c})
			}
		}
		rt.stop()
		delete(s.routes, name)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		old := rebound[n]
		var l *load
		if old != nil {
			l = old.load
		}
		rt := newRoute(s, want[n], l)
		if s.started {
			if err := rt.openAt(rt.cfg.Load(), targets[n]); err != nil {
				errs = append(errs, err)
				if old != nil {
					s.restore(old, err)
				}
				continue
			}
			rt.serve()
		}
		s.routes[n] = rt
		s.log.Info("route added", "route", n, "listen", rt.cfg.Load().Listen.String(), "targets", rt.targets().String())
	}
	return queue, errors.Join(errs...)
}

// resolveUDPTargets resolves the targets of cfg's UDP routes that are new
// or changed, before Update takes s.mu: a slow DNS answer must not stall
// accepts, the ends of relays and Stats on every route meanwhile. A route
// whose target is unchanged keeps the address it resolved before.
func (s *Server) resolveUDPTargets(cfg Config) map[string]*resolved {
	type known struct {
		target Addr
		tg     *udpTarget
	}
	cur := map[string]known{}
	s.mu.Lock()
	for name, rt := range s.routes {
		if rt.udp != nil {
			cur[name] = known{rt.cfg.Load().Targets[0].Addr, rt.udp.target.Load()}
		}
	}
	s.mu.Unlock()
	out := map[string]*resolved{}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if !r.Listen.Datagram() {
			continue
		}
		if k, ok := cur[r.Name]; ok && k.target == r.Targets[0].Addr {
			out[r.Name] = &resolved{tg: k.tg}
			continue
		}
		tg, err := resolveTarget(r)
		out[r.Name] = &resolved{tg, err}
	}
	return out
}

// restore puts back old, a route stopped for a rebind that failed with
// err, with its settings and load, listening where it did before: on the
// same port if it asked for port 0. The address was just freed, so this
// fails only if something else took it meanwhile; then the route is gone
// until an Update adds it again.
func (s *Server) restore(old *route, err error) {
	r := *old.cfg.Load()
	back := newRoute(s, r, old.load)
	if as := old.addrs(); r.Listen.Network != "unix" && r.Listen.port() == 0 && len(as) > 0 {
		host, _, _ := net.SplitHostPort(r.Listen.Address)
		_, port, _ := net.SplitHostPort(as[0].String())
		r.Listen.Address = net.JoinHostPort(host, port)
	}
	var tg *resolved
	if old.udp != nil {
		tg = &resolved{tg: old.udp.target.Load()}
	}
	if rerr := back.openAt(&r, tg); rerr != nil {
		s.log.Error("route rebind failed, and so did listening again as before; route removed", "route", old.name, "err", err, "relisten_err", rerr)
		return
	}
	back.serve()
	s.routes[old.name] = back
	s.log.Warn("route rebind failed; it goes on with its old settings", "route", old.name, "listen", back.addrs()[0].String(), "err", err)
}

// Addrs returns the addresses a route listens on (one per worker), with
// port 0 resolved, or nil if there is no such route.
func (s *Server) Addrs(route string) []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := s.routes[route]
	if rt == nil {
		return nil
	}
	return rt.addrs()
}

// Shutdown stops accepting and ends UDP sessions, then waits for stream
// relays in flight to finish by themselves. When ctx ends first, it closes
// the remaining connections, cancelling dials in progress, and returns
// ctx.Err(). It returns once every goroutine the Server started has
// exited.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, rt := range s.routes {
		rt.stop()
		rt.targets().close()
	}
	s.mu.Unlock()
	s.serveWG.Wait()

	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.mu.Lock()
		s.eng.abort(errShutdown)
		s.mu.Unlock()
		<-done
	}
	s.eng.close()
	return err
}

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); err != nil && err != context.Canceled {
		return err
	}
	return nil
}

var errShutdown = errors.New("relay: server shut down")

// route is one configured route with its listeners and counters. A route
// replaced by Update keeps serving the connections it accepted.
type route struct {
	srv  *Server
	name string
	cfg  atomic.Pointer[Route]

	lns  []net.Listener
	udp  *udpRoute
	done chan struct{} // closed by stop

	*load
}

// load is what a route's limits count, and its counters. A rebind replaces
// the route, but the relays the old one accepted go on: the new route
// shares the old one's load, so that those relays still count against
// MaxConns and MaxConnsPerClient, and in the route's Stats.
type load struct {
	active   atomic.Int64
	clientMu sync.Mutex
	clients  map[netip.Addr]int

	st counters
	// targets is the route's target set, carried over a rebind with the
	// rest of the load so that health and per-target counters go on.
	targets atomic.Pointer[targetSet]
}

// newRoute returns a route for r, sharing l if not nil.
func newRoute(s *Server, r Route, l *load) *route {
	if l == nil {
		l = &load{clients: map[netip.Addr]int{}}
	}
	rt := &route{srv: s, name: r.Name, done: make(chan struct{}), load: l}
	rt.cfg.Store(&r)
	rt.swapTargets(&r)
	return rt
}

// update gives rt settings that need no rebind; on an error (a UDP
// route's new target does not resolve) it keeps its old ones. tg is the
// UDP target resolved for r, if it was.
func (rt *route) update(r Route, tg *resolved) error {
	if rt.udp != nil {
		if err := rt.udp.update(rt.cfg.Load(), &r, tg); err != nil {
			return fmt.Errorf("route %q: %w", rt.name, err)
		}
	}
	rt.cfg.Store(&r)
	if ts := rt.swapTargets(&r); rt.srv.started {
		ts.startChecks(rt.srv)
	}
	return nil
}

// swapTargets gives rt a target set for r that keeps the backends of the
// current one it still has, and stops the current one's checks. It
// returns the new set, whose checks have not started.
func (rt *route) swapTargets(r *Route) *targetSet {
	old := rt.load.targets.Load()
	ts := newTargetSet(rt, r, old)
	rt.load.targets.Store(ts)
	old.close()
	return ts
}

func (rt *route) open() error { return rt.openAt(rt.cfg.Load(), nil) }

// openAt binds rt's listeners as r says: r is rt's config, or for a route
// put back by restore, a copy with the port it had. tg is r's UDP target,
// resolved beforehand, or nil to resolve it here.
func (rt *route) openAt(r *Route, tg *resolved) error {
	var err error
	if r.Listen.Datagram() {
		rt.udp, err = listenUDP(rt, r, tg)
	} else {
		rt.lns, err = listenStream(r)
	}
	if err != nil {
		return fmt.Errorf("route %q: %w", rt.name, err)
	}
	rt.srv.log.Info("listening", "route", rt.name, "listen", rt.addrs()[0].String(), "targets", rt.targets().String(), "workers", len(rt.addrs()))
	return nil
}

func (rt *route) addrs() []net.Addr {
	if rt.udp != nil {
		return rt.udp.addrs()
	}
	var as []net.Addr
	for _, ln := range rt.lns {
		as = append(as, ln.Addr())
	}
	return as
}

func (rt *route) serve() {
	rt.targets().startChecks(rt.srv)
	for _, ln := range rt.lns {
		rt.srv.serveWG.Add(1)
		go rt.srv.eng.serve(rt, ln)
	}
	if rt.udp != nil {
		for _, ln := range rt.udp.lns {
			rt.srv.serveWG.Add(1)
			rt.udp.readers.Add(1)
			go rt.udp.run(ln)
		}
	}
}

// stop closes the route's listeners; accept loops exit, relays go on.
func (rt *route) stop() {
	select {
	case <-rt.done:
		return
	default:
	}
	close(rt.done)
	closeAll(rt.lns)
	if rt.udp != nil {
		rt.udp.close()
	}
}
