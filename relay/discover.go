package relay

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroio/zeroio/internal/dnsmsg"
)

// DNS discovery of dynamic targets (Target.dynamic): the lookups are
// resolve.go's (lookupDynamic); here is when they are made and what
// their answers change. A Server keeps the last answer of each dynamic
// target, shared by every route that has the target and kept over
// reloads. Start and Update look up, before they take s.mu, the targets
// that have no answer yet, so that a route starts with its backends.
// Then, while a route's target set is in use, one goroutine of its
// (targetLife.discover) looks each of its dynamic targets up again as
// the answer's TTL runs out, bounded by Config.DNSMinTTL and DNSMaxTTL,
// and, when the backends change, swaps in a target set built from the
// new answer: the backends it keeps keep their health and counters,
// those it adds take new clients, those it drops take none while their
// connections go on. A lookup that fails keeps the last answer, and is
// tried again after DNSMinTTL, doubling up to 30 s (or DNSMaxTTL); the
// failure is logged once, and so is the recovery.

// Defaults of the TTL bounds.
const (
	DefaultDNSMinTTL = time.Second
	DefaultDNSMaxTTL = 5 * time.Minute
)

// maxRetry bounds the wait before a failed lookup is tried again.
const maxRetry = 30 * time.Second

// dnsTimeout bounds one query to one DNS server; tests shorten it.
var dnsTimeout = 2 * time.Second

// answer is a dynamic target's last DNS answer.
type answer struct {
	found   []found
	expires int64 // mono: look it up again then
	ok      bool  // a lookup answered: found is an answer
	failing bool  // the last lookup failed (found is the last answer)
	fails   int   // lookups failed in a row
}

// discovery is a Server's DNS client and answers.
type discovery struct {
	client         atomic.Pointer[dnsmsg.Client]
	minTTL, maxTTL atomic.Int64

	mu      sync.Mutex
	answers map[Target]*answer
}

// configure takes cfg's resolver and TTL bounds, and forgets the answers
// of targets cfg no longer has.
func (d *discovery) configure(cfg *Config) {
	c := &dnsmsg.Client{Timeout: dnsTimeout}
	if cfg.Resolver.IsValid() {
		c.Servers = []netip.AddrPort{cfg.Resolver}
	}
	d.client.Store(c)
	d.minTTL.Store(int64(cmp0(cfg.DNSMinTTL, DefaultDNSMinTTL)))
	d.maxTTL.Store(int64(cmp0(cfg.DNSMaxTTL, DefaultDNSMaxTTL)))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.answers == nil {
		d.answers = map[Target]*answer{}
	}
	want := map[Target]bool{}
	for _, r := range cfg.Routes {
		for _, t := range r.Targets {
			want[t] = true
		}
	}
	for t := range d.answers {
		if !want[t] {
			delete(d.answers, t)
		}
	}
}

// cmp0 is v, or def when v is 0.
func cmp0(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// prime looks up, concurrently, each dynamic target of routes that has
// no answer yet, and waits for them.
func (d *discovery) prime(s *Server, routes []Route) {
	var wg sync.WaitGroup
	asked := map[Target]bool{}
	for _, r := range routes {
		for _, t := range r.Targets {
			if !t.dynamic() || asked[t] || d.get(t) != nil {
				continue
			}
			asked[t] = true
			wg.Go(func() { d.refresh(context.Background(), s, r.Name, t) })
		}
	}
	wg.Wait()
}

// get returns t's last answer, nil if none.
func (d *discovery) get(t Target) *answer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.answers[t]
}

// current returns the backends of r's dynamic targets as last answered.
func (d *discovery) current(r *Route) map[Target][]found {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out map[Target][]found
	for _, t := range r.Targets {
		if a := d.answers[t]; a != nil && t.dynamic() {
			if out == nil {
				out = map[Target][]found{}
			}
			out[t] = a.found
		}
	}
	return out
}

// refresh looks t up and records the answer, or on a failure keeps the
// last one and sets when to try again; it logs a failure after an
// answer, and an answer after a failure, once. It returns the answer,
// nil if ctx ended first.
func (d *discovery) refresh(ctx context.Context, s *Server, route string, t Target) *answer {
	lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	fs, ttl, err := lookupDynamic(lctx, d.client.Load(), t)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	now := mono()
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.answers[t]
	next := &answer{found: fs, ok: true}
	if err != nil {
		next = &answer{failing: true, fails: 1}
		if old != nil {
			next.found, next.ok, next.fails = old.found, old.ok, old.fails+1
		}
		wait := min(d.minTTL.Load()<<min(next.fails-1, 16), min(d.maxTTL.Load(), int64(maxRetry)))
		next.expires = now + max(wait, d.minTTL.Load())
		switch {
		case old != nil && old.failing:
		case next.ok:
			s.log.Warn("DNS lookup failed; keeping the last answer", "route", route, "target", t.Addr.String(), "backends", len(next.found), "err", err)
		default:
			s.log.Warn("DNS lookup failed; the target has no backend until it answers", "route", route, "target", t.Addr.String(), "err", err)
		}
	} else {
		next.expires = now + min(max(int64(ttl)*int64(time.Second), d.minTTL.Load()), d.maxTTL.Load())
		if old != nil && old.failing {
			s.log.Info("DNS lookup answers again", "route", route, "target", t.Addr.String(), "backends", len(fs))
		}
	}
	d.answers[t] = next
	return next
}

// targetLife is what the target sets built from one Route share: the
// context that ends their active checks and discovery, the checkers
// running, and whether discovery runs.
type targetLife struct {
	ctx    context.Context
	cancel context.CancelFunc
	rt     *route
	r      *Route

	mu          sync.Mutex
	checks      map[*backend]context.CancelFunc // the backends a checker runs for
	discovering bool
}

func newTargetLife(rt *route, r *Route) *targetLife {
	l := &targetLife{rt: rt, r: r, checks: map[*backend]context.CancelFunc{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// dynamic returns the dynamic targets of the life's route.
func (l *targetLife) dynamic() []Target {
	var out []Target
	for _, t := range l.r.Targets {
		if t.dynamic() {
			out = append(out, t)
		}
	}
	return out
}

// startDiscovery starts the route's discovery for life, once, if it has
// dynamic targets. The goroutine counts in the server's serveWG.
func (l *targetLife) startDiscovery() {
	rt := l.rt
	dyn := l.dynamic()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(dyn) == 0 || l.discovering || l.ctx.Err() != nil {
		return
	}
	l.discovering = true
	rt.srv.serveWG.Add(1)
	go func() {
		defer rt.srv.serveWG.Done()
		l.discover(rt, dyn)
	}()
}

// discover looks the dynamic targets up as their answers expire, and
// rebuilds rt's target set when one changes, until life ends.
func (l *targetLife) discover(rt *route, dyn []Target) {
	d := &rt.srv.disc
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		next := int64(1<<63 - 1)
		for _, tg := range dyn {
			a := d.get(tg)
			if a == nil || mono() >= a.expires {
				if a = d.refresh(l.ctx, rt.srv, rt.name, tg); a == nil {
					return
				}
			}
			next = min(next, a.expires)
		}
		rt.rediscovered(l)
		t.Reset(time.Duration(max(next-mono(), int64(10*time.Millisecond))))
	}
}

// rediscovered swaps in a target set built from the answers as they are
// now, if they change rt's backends and life is still its set's.
func (rt *route) rediscovered(l *targetLife) {
	rt.load.swapMu.Lock()
	cur := rt.targets()
	if cur.life != l {
		rt.load.swapMu.Unlock()
		return
	}
	ts := newTargetSet(rt, l.r, cur, l, rt.srv.disc.current(l.r))
	if sameBackends(cur, ts) {
		rt.load.swapMu.Unlock()
		return
	}
	rt.load.targets.Store(ts)
	rt.load.swapMu.Unlock()
	var added, removed []string
	for _, b := range ts.bs {
		if !slices.Contains(cur.bs, b) {
			added = append(added, b.name)
		}
	}
	for _, b := range cur.bs {
		if !slices.Contains(ts.bs, b) {
			removed = append(removed, b.name)
			l.stopCheck(b)
		}
	}
	rt.srv.log.Info("DNS answer changed the targets", "route", rt.name, "added", strings.Join(added, ","), "removed", strings.Join(removed, ","), "targets", len(ts.bs))
	if ts.over > 0 && cur.over == 0 {
		rt.srv.log.Warn("DNS answers give more backends than a route may have; the rest are left out", "route", rt.name, "max", MaxTargets, "left_out", ts.over)
	}
	ts.startChecks(rt.srv)
}

// sameBackends reports whether a and b give the same backends the same
// weights and priorities.
func sameBackends(a, b *targetSet) bool {
	return slices.Equal(a.bs, b.bs) && slices.Equal(a.weights, b.weights) && slices.Equal(a.prio, b.prio)
}

// Discover returns the backends the dynamic target t stands for now, as
// a route would find them (see [Target]), asking cfg.Resolver or else
// the servers of /etc/resolv.conf; a target that is not dynamic is
// returned as it is. For checks before a deploy, as zeroio relay
// --check-targets makes.
func Discover(ctx context.Context, cfg Config, t Target) ([]Addr, error) {
	if !t.dynamic() {
		return []Addr{t.Addr}, nil
	}
	var d discovery
	d.configure(&cfg)
	fs, _, err := lookupDynamic(ctx, d.client.Load(), t)
	if err != nil {
		return nil, err
	}
	out := make([]Addr, len(fs))
	for i, f := range fs {
		out[i] = f.addr
	}
	return out, nil
}
