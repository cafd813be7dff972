package relay

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one backend of a [Route], or, discovered from DNS, a set of
// them.
//
// A target given by host name is by default one backend, dialled at the
// name's addresses in turn (see resolve.go). With Resolve [ResolveAll] it
// stands for every address the name has, each a backend of its own with
// the target's weight; an SRV target (srv+tcp://_svc._tcp.example.com,
// srv+udp://...) stands for every address of every record's target, each
// a backend with the record's port, weight and priority. Such targets are
// looked up through [Config.Resolver], again as their TTL runs out
// (bounded by [Config.DNSMinTTL] and [Config.DNSMaxTTL]): a backend the
// answer adds takes new clients at once, one it drops takes none, while
// its connections go on. A backend discovered so has its own health,
// counters and name in logs and [TargetStats]: the target's URL, a slash
// and its address, as srv+tcp://_svc._tcp.example.com/192.0.2.7:8080.
type Target struct {
	Addr Addr
	// Weight is the target's share of new clients relative to the route's
	// other targets, from 0 to [MaxWeight]: a target of weight 2 gets
	// twice the clients of one of weight 1. A weight of 0 takes no new
	// client (its connections go on), as HAProxy's weight 0 drains a
	// server; at least one target needs a positive weight. A Route built
	// with the single [Route.Target] has it at weight 1. The backends of
	// a ResolveAll target each have this weight; those of an SRV target
	// their record's, scaled within its priority so that the heaviest
	// record gets MaxWeight and the others their share of it, at least 1
	// (a record of weight 0 beside heavier ones keeps the very small
	// chance RFC 2782 gives it); an SRV target's own weight must be 1.
	Weight int
	// Resolve is "" or [ResolveAll]; see above.
	Resolve Resolve
}

// Resolve says what a target given by host name stands for.
type Resolve string

// ResolveAll makes a target given by host name stand for each of the
// name's addresses, a backend each.
const ResolveAll Resolve = "all"

// dynamic reports whether t stands for the backends a DNS answer gives:
// an SRV name, or a host name with ResolveAll.
func (t Target) dynamic() bool {
	if t.Addr.isSRV() {
		return true
	}
	if t.Resolve != ResolveAll || t.Addr.Network == "unix" {
		return false
	}
	_, ok := literalTarget(t.Addr)
	return !ok
}

// MaxWeight is the largest [Target.Weight], as HAProxy's.
const MaxWeight = 256

// MaxTargets is the most targets a route may have.
const MaxTargets = 256

// Balance names how a route spreads new clients over its targets.
type Balance string

const (
	// RoundRobin gives each target its weight's share of clients in
	// turn, interleaved as nginx's smooth weighted round-robin does
	// (weights 5, 1, 1 give a a b a c a a, not a a a a a b c). The
	// default.
	RoundRobin Balance = "round-robin"
	// LeastConn gives a new client to the target with the fewest active
	// connections relative to its weight; ties go round in turn.
	LeastConn Balance = "least-conn"
	// ClientHash sends each client IP address to the same target for as
	// long as the set of live targets stays the same, by rendezvous
	// (highest random weight) hashing: each target scores every client
	// address and the highest weighted score wins. Adding one target to
	// n moves only the clients it now wins, about 1/(n+1) of them, and
	// removing or losing one moves only its own, about 1/n; the others
	// keep theirs. A route has few targets, so scoring each on every
	// connection costs less than the lookup table of a ring or Maglev
	// would need rebuilding on each change, and the result is exact
	// rather than approximate. Clients without an IP address (Unix
	// sockets) all hash alike.
	ClientHash Balance = "client-hash"
)

func (b Balance) valid() bool {
	switch b {
	case "", RoundRobin, LeastConn, ClientHash:
		return true
	}
	return false
}

// HealthCheck configures active health checks, as HAProxy's `check inter
// rise fall`: every Interval the relay connects to each target and closes
// the connection at once (for a UDP route, no check is possible: it is
// refused). A target is marked down after Fall checks in a row fail, and
// back up after Rise in a row succeed. Without checks (Interval 0, the
// default) no goroutine runs and health is passive only: a failed dial
// marks a target down for a backoff (1 s, doubling to 30 s), after which
// the next client tries it again. With checks, a target a failed dial
// marks down stays down until Rise checks pass.
type HealthCheck struct {
	// Interval between checks of one target; 0 disables active checks.
	Interval time.Duration
	// Timeout bounds each check's connect; 0 is the smaller of Interval
	// and the route's DialTimeout.
	Timeout time.Duration
	// Rise and Fall are the numbers of passed and failed checks in a row
	// that bring a target up and down; 0 is 2 and 3, HAProxy's defaults.
	Rise, Fall int
}

// backend is one target of a route, shared by every target set of the
// route that still has it, so that its health and counters outlive a
// reload that keeps it.
type backend struct {
	network, address string
	addr             Addr
	from             Addr       // the dynamic target it was discovered for; zero for a configured one
	name             string     // for logs and stats: addr's URL, or from's, a slash and address
	udp              *udpTarget // a discovered UDP backend's address, which needs no lookup
	key              uint64     // hash of addr: the client-hash seed
	rt               *route     // for logs; the route that first had it

	active                 atomic.Int64 // connections relayed to it now
	dialing                atomic.Int64 // dials to it in progress, which least-conn counts as connections
	conns, dialFails       atomic.Uint64
	bytesUp, bytesDown     atomic.Uint64
	downUntil              atomic.Int64 // unix ns; 0 up, noRetry until checks pass
	failStreak             atomic.Int32 // dial failures in a row, for the backoff
	checked                atomic.Bool  // active checks decide when it comes back
	loops                  atomic.Bool  // a dial reached the relay itself: never a last resort
	resolving              atomic.Bool  // a UDP target's host name is being looked up again
	rise, fall             atomic.Int32 // the checker's counts in a row
	admin                  targetAdmin  // set at run time (Server.SetTargetState)
	stateMu                sync.Mutex   // orders up/down transitions and their log lines
	lastLoggedDown, logged bool
}

const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
	noRetry    = int64(^uint64(0) >> 1) // down until an active check brings it up
)

// newBackend returns a backend for a, discovered for the dynamic target
// from (zero: configured).
func newBackend(rt *route, a, from Addr) *backend {
	b := &backend{network: a.Network, address: a.Address, addr: a, from: from, name: backendName(a, from), rt: rt, key: targetKey(a)}
	if ap, ok := literalTarget(a); ok && from.Network != "" && a.Datagram() {
		b.udp = &udpTarget{network: a.Network, addr: ap, from: a}
	}
	return b
}

// backendName is the name of the backend at a discovered for from: its
// URL alone for a configured one.
func backendName(a, from Addr) string {
	if from.Network == "" {
		return a.String()
	}
	return from.String() + "/" + a.Address
}

// targetKey is a's client-hash seed: FNV-1a of its URL, the same in
// every process (maphash's seed is random per process), so that a
// restarted relay, or several behind one load balancer, give a client
// the target it had, as HAProxy's balance source does.
func targetKey(a Addr) uint64 {
	h := fnv.New64a()
	h.Write([]byte(a.Network + "://" + a.Address))
	return mix64(h.Sum64())
}

// isDown reports whether b is marked down at now (unix ns, or 0 if the
// caller has not read the clock: then only the mark is looked at).
func (b *backend) isDown(now *int64) bool {
	d := b.downUntil.Load()
	if d == 0 {
		return false
	}
	if *now == 0 {
		*now = time.Now().UnixNano()
	}
	return *now < d
}

// connStart counts a connection relayed to b; connEnd ends it.
func (b *backend) connStart() {
	b.active.Add(1)
	b.conns.Add(1)
}

func (b *backend) connEnd(up, down uint64) {
	b.active.Add(-1)
	b.bytesUp.Add(up)
	b.bytesDown.Add(down)
}

// targetSet is a route's targets and balancing policy, immutable but for
// the policy's cursor; a reload, or a DNS answer that changes a dynamic
// target's backends, swaps in a new one that keeps the backends (health,
// counters) of the targets it still has.
type targetSet struct {
	bs      []*backend
	weights []int
	prio    []uint16 // each target's SRV priority, lower first; nil when all are 0
	npos    int      // targets with a positive weight: the most one client may try
	policy  Balance
	seq     []uint16      // smooth weighted round-robin order
	next    atomic.Uint64 // round-robin cursor
	check   HealthCheck   // Interval 0: passive only
	dialTO  time.Duration
	proxy   int // the route's SendProxy: checks send a header too
	// gone are backends the route no longer has (a reload or a DNS
	// answer dropped them) whose connections go on: draining.
	gone []*backend
	over int // backends left out past MaxTargets

	// life is shared by the sets built from one Route: it ends when a
	// reload replaces them or the route ends, stopping their active
	// checks and DNS discovery.
	life *targetLife

	// reseq is seq for the weights set at run time, if any (reweigh).
	reseq atomic.Pointer[[]uint16]
}

// newTargetSet builds r's target set, taking the backends of old (may be
// nil) whose address r still has, with the backends answers gives its
// dynamic targets (none yet for those it lacks). life is the set's,
// when it replaces old for a DNS answer; nil starts a new one.
func newTargetSet(rt *route, r *Route, old *targetSet, life *targetLife, answers map[Target][]found) *targetSet {
	if life == nil {
		life = newTargetLife(rt, r)
	}
	ts := &targetSet{policy: r.Balance, check: r.HealthCheck, dialTO: r.DialTimeout, proxy: r.SendProxy, life: life}
	if ts.policy == "" {
		ts.policy = RoundRobin
	}
	for _, t := range r.Targets {
		if !t.dynamic() {
			ts.add(rt, old, t.Addr, Addr{}, t.Weight, 0)
			continue
		}
		for _, f := range answers[t] {
			ts.add(rt, old, f.addr, t.Addr, f.weight, f.prio)
		}
	}
	ts.gone = old.dropped(ts)
	ts.seq = smoothSequence(ts.weights)
	ts.reweigh()
	return ts
}

// add appends the backend at a (discovered for from, if not zero) with
// weight w and priority prio, old's if old has it.
func (ts *targetSet) add(rt *route, old *targetSet, a, from Addr, w int, prio uint16) {
	if len(ts.bs) >= MaxTargets {
		ts.over++
		return
	}
	b := old.find(backendName(a, from))
	if b == nil {
		b = newBackend(rt, a, from)
	}
	b.checked.Store(ts.check.Interval > 0)
	if ts.check.Interval <= 0 && b.downUntil.Load() == noRetry {
		// Checks were turned off: retry it as passive health would.
		b.downUntil.Store(time.Now().Add(minBackoff).UnixNano())
	}
	if prio != 0 && ts.prio == nil {
		ts.prio = make([]uint16, len(ts.bs), cap(ts.bs))
	}
	if ts.prio != nil {
		ts.prio = append(ts.prio, prio)
	}
	ts.bs = append(ts.bs, b)
	ts.weights = append(ts.weights, w)
	if w > 0 {
		ts.npos++
	}
}

// find returns the backend of ts named name, draining or not; nil if
// none (or ts is nil).
func (ts *targetSet) find(name string) *backend {
	if ts == nil {
		return nil
	}
	for _, bs := range [2][]*backend{ts.bs, ts.gone} {
		for _, b := range bs {
			if b.name == name {
				return b
			}
		}
	}
	return nil
}

// dropped returns the backends of ts that next has not, and that still
// relay connections: next's draining ones.
func (ts *targetSet) dropped(next *targetSet) []*backend {
	if ts == nil {
		return nil
	}
	var out []*backend
	for _, bs := range [2][]*backend{ts.bs, ts.gone} {
		for _, b := range bs {
			if b.active.Load() > 0 && !slices.Contains(next.bs, b) && !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	return out
}

// close stops the active checks and DNS discovery of the set and of the
// sets discovery built from it, if any ran.
func (ts *targetSet) close() {
	if ts != nil {
		ts.life.cancel()
	}
}

// triedSet records the targets one client was given, by index in its
// target set: up to MaxTargets.
type triedSet struct{ bits [MaxTargets / 64]uint64 }

func (t *triedSet) add(i int)      { t.bits[i>>6] |= 1 << (i & 63) }
func (t *triedSet) has(i int) bool { return t.bits[i>>6]&(1<<(i&63)) != 0 }

// pick returns the target for a client that has not been given yet (it
// records the one it returns in tried), preferring those that are up; a
// target marked down is returned only when every other is down or
// tried, so that a target back before its mark expires still serves
// rather than clients being refused. nil when every target with a
// positive weight was tried. Of targets with SRV priorities, only those
// of the best (lowest) priority that has a target up and untried are
// given while one is; a later priority's only when none of an earlier
// one is. Allocation-free; safe for concurrent use.
func (ts *targetSet) pick(client netip.Addr, tried *triedSet) *backend {
	var now int64
	for _, anyState := range [2]bool{false, true} {
		t := *tried
		if ts.prio != nil && !anyState {
			ts.skipLaterPriorities(&t, &now)
		}
		var i int
		switch ts.policy {
		case LeastConn:
			i = ts.pickLeastConn(&t, anyState, &now)
		case ClientHash:
			i = ts.pickHash(client, &t, anyState, &now)
		default:
			i = ts.pickRoundRobin(&t, anyState, &now)
		}
		if i >= 0 {
			tried.add(i)
			return ts.bs[i]
		}
	}
	return nil
}

// skipLaterPriorities adds to t the targets after the best priority of
// which a target is eligible and up, so that a pass over the targets up
// gives only those of that priority.
func (ts *targetSet) skipLaterPriorities(t *triedSet, now *int64) {
	best := -1
	for i, p := range ts.prio {
		if (best < 0 || int(p) < best) && ts.eligible(i, t, false, now) {
			best = int(p)
		}
	}
	for i, p := range ts.prio {
		if best >= 0 && int(p) > best {
			t.add(i)
		}
	}
}

// eligible reports whether target i may take a new client: a positive
// weight, enabled (targetAdmin), not tried, and up unless anyState.
func (ts *targetSet) eligible(i int, tried *triedSet, anyState bool, now *int64) bool {
	b := ts.bs[i]
	return ts.weight(i) > 0 && b.admin.takes() && !tried.has(i) && (!b.isDown(now) || anyState && !b.loops.Load())
}

// String lists the targets, for logs.
func (ts *targetSet) String() string {
	s := ""
	for i, b := range ts.bs {
		if i > 0 {
			s += ","
		}
		s += b.name
		if len(ts.bs) > 1 && ts.weights[i] != 1 {
			s += fmt.Sprintf("*%d", ts.weights[i])
		}
	}
	return s
}

// logState logs b's transition to down or up once per change.
func (b *backend) logState(log *slog.Logger, down bool, why string, err error) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	if b.logged && b.lastLoggedDown == down {
		return
	}
	if !b.logged && !down {
		return // up from the start: nothing to say
	}
	b.logged, b.lastLoggedDown = true, down
	if down {
		log.Warn("target down", "route", b.rt.name, "target", b.name, "why", why, "err", err)
	} else {
		log.Info("target up", "route", b.rt.name, "target", b.name, "why", why)
	}
}

// validateTargets checks r's targets, balance and health checks,
// reporting each problem to bad.
func (r *Route) validateTargets(bad func(string, ...any)) {
	if r.Listen.isSRV() {
		bad("listen %s: an SRV name is for targets", r.Listen)
	}
	if r.Target.Network != "" && (len(r.Targets) != 1 || r.Targets[0].Addr != r.Target) {
		bad("give Target or Targets, not both")
		return
	}
	if len(r.Targets) == 0 {
		bad("no target address")
		return
	}
	if len(r.Targets) > MaxTargets {
		bad("%d targets: at most %d", len(r.Targets), MaxTargets)
	}
	seen := map[Addr]bool{}
	positive := false
	for _, t := range r.Targets {
		switch {
		case t.Addr.Network == "":
			bad("a target has no address")
			continue
		case r.Listen.Network != "" && r.Listen.Datagram() != t.Addr.Datagram():
			bad("cannot relay %s to %s: UDP relays only to UDP, streams only to TCP or Unix", r.Listen, t.Addr)
		case t.Weight < 0 || t.Weight > MaxWeight:
			bad("target %s: weight %d: want 0 to %d", t.Addr, t.Weight, MaxWeight)
		case seen[t.Addr]:
			bad("target %s listed twice", t.Addr)
		case t.Addr.Network != "unix" && !t.Addr.isSRV() && t.Addr.port() == 0:
			bad("target %s: port 0 cannot be dialled", t.Addr)
		case t.Resolve != "" && t.Resolve != ResolveAll:
			bad("target %s: resolve %q: want %s or nothing", t.Addr, t.Resolve, ResolveAll)
		case t.Resolve != "" && t.Addr.Network == "unix":
			bad("target %s: a Unix socket path is not resolved", t.Addr)
		case t.Addr.isSRV() && t.Weight != 1:
			bad("target %s: weight %d: an SRV target's records give the weights (leave it 1)", t.Addr, t.Weight)
		}
		seen[t.Addr] = true
		positive = positive || t.Weight > 0
	}
	if !positive {
		bad("every target has weight 0: at least one needs a positive weight to take clients")
	}
	if !r.Balance.valid() {
		bad("balance %q: want %s, %s or %s", r.Balance, RoundRobin, LeastConn, ClientHash)
	}
	h := r.HealthCheck
	switch {
	case h.Interval < 0 || h.Timeout < 0:
		bad("negative health check interval or timeout")
	case h.Rise < 0 || h.Fall < 0:
		bad("negative health check rise or fall")
	case h.Interval == 0 && (h.Timeout != 0 || h.Rise != 0 || h.Fall != 0):
		bad("health check timeout, rise and fall need an interval")
	case h.Interval > 0 && r.Listen.Datagram():
		bad("health checks connect, so they are for stream routes; UDP targets are checked by their replies")
	}
}
