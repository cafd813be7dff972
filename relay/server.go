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
	connLog  slog.LevelVar // Config.ConnLog; Update changes it
	fdBudget atomic.Int64  // the most stream relays the descriptor limit allows; 0 none known
	gate     gate
	ports    atomic.Pointer[[]netip.AddrPort] // stream listeners, for dialsSelf
	udpPorts atomic.Pointer[[]netip.AddrPort] // UDP listening sockets, for sendsToSelf
	maxConns atomic.Int64
	active   atomic.Int64 // stream relays in progress, all routes
	// pending counts clients an engine accepted that hold no slot yet
	// and wait for one (the event engine's, handed between loops or
	// parked at a limit): atLimit counts them with the active relays.
	pending atomic.Int64

	updateMu sync.Mutex  // one Update at a time, resolving targets unlocked
	handing  atomic.Bool // a HandOver is in flight

	mu       sync.Mutex
	started  bool
	closed   bool
	sealed   bool              // Shutdown has handed on what was queued: no connection starts
	stopping chan struct{}     // closed when Shutdown begins
	cfg      Config            // the running configuration, normalized
	routes   map[string]*route // by name
	fronts   map[string]*front // stream listen addresses, by frontKey; set by Start
	eng      engine
	connWG   sync.WaitGroup // one per relayed or pending stream connection
	serveWG  sync.WaitGroup // accept loops and UDP readers
	disc     discovery      // DNS discovery's client and answers
	noSplice bool           // Config.noSplice

	streamSeq atomic.Uint64 // the last stream ID (newStreamID)

	// inherited are the sockets Inherit gave, which routes use rather
	// than bind; Shutdown closes them. Under mu.
	inherited []*inherited
	// udpFronts are the UDP listen addresses shared by routes, by
	// frontKey, under mu; set by Start.
	udpFronts map[string]*udpFront

	// held is what a take-over's Start would start serving, which
	// waits until the sender lets go (TakeOver). Under mu.
	held *[]func()
}

// New validates cfg and returns a Server that has not opened anything yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	s := &Server{log: cfg.Logger, cfg: cfg, routes: map[string]*route{}, fronts: map[string]*front{}, udpFronts: map[string]*udpFront{}, stopping: make(chan struct{})}
	s.disc.configure(&cfg)
	s.setConnLog(cfg)
	s.noSplice = cfg.noSplice
	s.eng = newEngine(s, cfg.Engine)
	s.ports.Store(new([]netip.AddrPort))
	s.udpPorts.Store(new([]netip.AddrPort))
	s.gate.wake = make(chan struct{})
	s.setBudget(cfg)
	s.maxConns.Store(int64(cfg.MaxConns))
	for i := range cfg.Routes {
		rt := newRoute(s, cfg.Routes[i], nil)
		s.routes[rt.name] = rt
	}
	return s, nil
}

// Start binds every route's listeners, or takes the sockets given to
// [Server.Inherit], and starts serving them in the background: one
// goroutine per listener, plus one per relayed connection or UDP session.
// If any bind fails (an address in use), or an inherited socket is one no
// route uses, Start closes what it opened and returns the error; it may be
// called again.
func (s *Server) Start() error {
	s.mu.Lock()
	routes := s.cfg.Routes
	s.mu.Unlock()
	s.disc.prime(s, routes) // before s.mu, as Update's lookups
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrServerClosed
	}
	if s.started {
		return errors.New("relay: Start called twice")
	}
	if err := s.checkInherited(s.cfg); err != nil {
		return err
	}
	unopened := s.routes
	s.routes = map[string]*route{}
	s.started = true
	if _, err := s.apply(s.cfg, nil, unopened); err != nil {
		s.started = false
		s.routes = unopened
		return err
	}
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

// Update applies a new configuration, as on SIGHUP, all or nothing: if
// any route of cfg cannot start (its address cannot be bound, a UDP
// target does not resolve), the running configuration stays whole, every
// route listening and relaying as before, and the error says why.
//
// Otherwise routes that are gone stop listening, new ones start, and
// changed ones take their new settings for new connections. Established
// stream connections are never touched: they finish under the settings
// they started with, and still count against their route's limits. A UDP
// route's new target likewise takes new sessions while those under way
// keep theirs.
//
// A UDP reload loses no datagram. A UDP route whose listen address stays
// (or names the address its sockets are bound to, as "udp" and "udp4" do
// for an IPv4 address) keeps its sockets and sessions; more workers add
// sockets to their SO_REUSEPORT group, fewer steer new datagrams to the
// sockets that stay (a BPF program on the group) and retire the others
// once they have relayed what they hold (where the kernel refuses the
// program, the surplus sockets stay open, and a warning says so). A UDP
// route whose listen address changes opens its new sockets first,
// sharing the port with the old ones where needed (SO_REUSEPORT, Linux),
// and the old ones stop only then, relaying the datagrams queued on
// them; the sessions of a moved or removed UDP route end with it, since
// their replies leave through its sockets.
//
// A stream reload loses no client: routes sharing a listen address
// change by swapping the route table of the address's listening sockets,
// which stay open. More workers keep the sockets there are and add the
// missing ones to their SO_REUSEPORT group. Fewer workers steer new
// clients away from the surplus sockets (a BPF program on the group,
// SO_ATTACH_REUSEPORT_CBPF), which accept what their handshakes already
// started for a couple of seconds and then close; where the kernel
// refuses the program and does not migrate handshakes itself
// (net.ipv4.tcp_migrate_req), the surplus sockets stay open instead, and
// a warning says so. A route that moves to a new address listens there
// before its old sockets close, and the connections queued on those
// (handshake done, not yet accepted) are accepted and relayed rather than
// reset; clients that connect to the old address after that are refused.
// Moving between the wildcard and a specific address of one port shares
// the port for that moment, which needs SO_REUSEPORT (Linux); elsewhere
// such a reload is refused.
func (s *Server) Update(cfg Config) error {
	cfg, err := cfg.normalize()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	targets := s.resolveUDPTargets(cfg)
	s.disc.configure(&cfg)
	s.disc.prime(s, cfg.Routes)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	var drained []queuedConn
	if !s.started {
		s.routes = s.unopened(cfg)
	} else {
		drained, err = s.apply(cfg, targets, nil)
	}
	if err == nil {
		s.cfg = cfg
		s.maxConns.Store(int64(cfg.MaxConns))
		s.setBudget(cfg)
		s.setConnLog(cfg)
	}
	s.slotFreed() // a limit may have risen
	s.updatePorts()
	if len(drained) > 0 {
		// Like an accept loop's: Shutdown waits for these connections
		// to be handed over before it waits for the relays.
		s.serveWG.Add(1)
	}
	s.mu.Unlock()
	if len(drained) > 0 {
		for _, d := range drained { // the engine takes s.mu
			s.eng.serveQueued(d.f, d.c)
		}
		s.serveWG.Done()
	}
	if err != nil {
		s.mu.Lock()
		s.disc.configure(&s.cfg)
		s.mu.Unlock()
		return fmt.Errorf("relay: reload refused, running configuration kept: %w", err)
	}
	return nil
}

// unopened returns routes for cfg that open nothing yet, carrying over
// the load of current routes of the same name.
func (s *Server) unopened(cfg Config) map[string]*route {
	m := map[string]*route{}
	for _, r := range cfg.Routes {
		var l *load
		if old := s.routes[r.Name]; old != nil {
			l = old.load
		}
		m[r.Name] = newRoute(s, r, l)
	}
	return m
}

// queuedConn is a connection taken from the accept queue of a front's
// listener as it stopped, for the engine's serveQueued.
type queuedConn struct {
	f *front
	c net.Conn
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
// relays in flight to finish by themselves. Clients waiting in a stream
// listener's accept queue (handshake done, not yet accepted) are taken
// from it as it closes and relayed like the others, not reset, as a
// reload does (Linux); those over a limit are closed. When ctx ends
// first, it closes the remaining connections, cancelling dials in
// progress, and returns ctx.Err(). It returns once every goroutine the
// Server started has exited.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		close(s.stopping)
	}
	s.closed = true
	var queued []queuedConn
	for _, f := range s.fronts {
		queued = append(queued, f.stop()...)
	}
	for _, f := range s.udpFronts {
		f.close()
	}
	for _, rt := range s.routes {
		rt.stop()
		rt.targets().close()
	}
	s.closeInherited()
	s.serveWG.Add(1) // as Update's hand-over
	s.mu.Unlock()
	for _, h := range queued { // the engine takes s.mu
		s.eng.serveQueued(h.f, h.c)
	}
	s.serveWG.Done()
	s.serveWG.Wait()
	s.mu.Lock()
	s.sealed = true
	s.mu.Unlock()

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

// route is one configured route with its counters; a stream route's
// listeners are its front's, a UDP route's its own. A route replaced by
// Update keeps serving the connections it accepted.
type route struct {
	srv  *Server
	name string
	cfg  atomic.Pointer[Route]

	front *front        // a stream route's listen address, under srv.mu
	udp   *udpRoute     // a UDP route's sockets
	done  chan struct{} // closed by stop

	*load
	pauseLog pauseLog
	proxyLog pauseLog // bad PROXY headers (Server.badProxy)
	rateLog  pauseLog // clients over ConnRatePerClient (withinRate)
}

// load is what a route's limits count, and its counters. A rebind replaces
// the route, but the relays the old one accepted go on: the new route
// shares the old one's load, so that those relays still count against
// MaxConns and MaxConnsPerClient, and in the route's Stats.
type load struct {
	active   atomic.Int64
	parked   atomic.Int64 // clients accepted and waiting for a slot of the route (evConn.park)
	clientMu sync.Mutex
	clients  map[netip.Addr]int
	// rateClients is the table of per-client rates, made when a
	// route first needs it (clientTable).
	rateClients atomic.Pointer[clientTable]

	st counters
	// targets is the route's target set, carried over a rebind with the
	// rest of the load so that health and per-target counters go on.
	// swapMu orders its swaps: a reload's and DNS discovery's.
	targets atomic.Pointer[targetSet]
	swapMu  sync.Mutex
}

// setBudget derives the descriptor budget for cfg and warns when the
// configured limit is above it.
func (s *Server) setBudget(cfg Config) {
	s.fdBudget.Store(fdBudget(cfg.Routes))
	if b := s.fdBudget.Load(); b > 0 && (cfg.MaxConns == 0 || int64(cfg.MaxConns) > b) {
		lvl := slog.LevelDebug
		if cfg.MaxConns > 0 {
			lvl = slog.LevelWarn
		}
		s.log.Log(context.Background(), lvl, "descriptor limit caps concurrent streams; more clients wait in the listen backlog",
			"fd_limit", descriptorLimit(), "max_streams", b, "max_conns", cfg.MaxConns)
	}
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

// update gives rt settings that need no rebind; on an error it keeps its
// old ones. tg is the UDP target resolved for r, if it was.
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
	if rt.udp != nil {
		rt.udp.noteUnresolved()
	}
	return nil
}

// swapTargets gives rt a target set for r that keeps the backends of the
// current one it still has, and stops the current one's checks. It
// returns the new set, whose checks have not started.
func (rt *route) swapTargets(r *Route) *targetSet {
	rt.load.swapMu.Lock()
	defer rt.load.swapMu.Unlock()
	old := rt.load.targets.Load()
	old.clearAdmin() // what was set at run time lasts until a reload
	ts := newTargetSet(rt, r, old, nil, rt.srv.disc.current(r))
	rt.load.targets.Store(ts)
	old.close()
	return ts
}

// openUDP binds a UDP route's sockets as r says: r is rt's config, or for
// a route put back by restore, a copy with the port it had. tg is r's
// target, resolved beforehand, or nil to resolve it here. reuse puts the
// sockets in a SO_REUSEPORT group even when there is one.
func (rt *route) openUDP(r *Route, tg *resolved, reuse bool) error {
	var err error
	rt.udp, err = listenUDP(rt, r, tg, reuse)
	if err != nil {
		return fmt.Errorf("route %q: %w", rt.name, err)
	}
	rt.srv.log.Info("listening", "route", rt.name, "listen", rt.addrs()[0].String(), "targets", rt.targets().String(), "workers", len(rt.addrs()))
	return nil
}

func (rt *route) addrs() []net.Addr {
	switch {
	case rt.udp != nil:
		return rt.udp.addrs()
	case rt.front != nil:
		return rt.front.addrs()
	}
	return nil
}

// serve starts a UDP route's readers and the route's health checks.
func (rt *route) serve() {
	if h := rt.srv.held; h != nil {
		*h = append(*h, rt.serve)
		return
	}
	rt.targets().startChecks(rt.srv)
	if rt.udp != nil {
		rt.udp.serve(rt.udp.lns)
	}
}

// stop closes a UDP route's sockets; a stream route's are its front's.
func (rt *route) stop() {
	select {
	case <-rt.done:
		return
	default:
	}
	close(rt.done)
	if rt.udp != nil {
		rt.udp.close()
	}
}
