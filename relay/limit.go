package relay

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Rates are token buckets kept as a theoretical arrival time (the
// generic cell rate algorithm of ATM, RFC 2381's GCRA; redis-cell's
// throttle): one int64 per bucket, the time at which the bucket would
// be full again. A unit costs cost nanoseconds of that time, and the
// bucket holds burst nanoseconds' worth: units may pass while the time
// they push it to stays within burst of now. Every engine, and UDP,
// decides with these functions; the engines only wait as they say.

// gcraTake takes one unit from the bucket tat (cost and burst in
// nanoseconds) at now, if it holds one, and reports whether it did.
func gcraTake(tat *int64, now, cost, burst int64) bool {
	t := max(*tat, now)
	if t+cost-now > burst {
		return false
	}
	*tat = t + cost
	return true
}

// A byte rate's bucket holds paceWindow's worth of bytes; a paced
// direction that finds it short waits until it holds paceQuantum, or
// paceTick's worth at high rates, or at low rates half the bucket: each
// wake-up moves a chunk worth its system calls, and a direction wakes
// at most once per paceTick (the event loops' timer resolution).
const (
	paceQuantum = 64 << 10
	paceTick    = int64(10e6) // 10 ms
)

// paceWindow is 100 ms; a variable, not a constant, so that a test can
// make the waits long.
var paceWindow = int64(100e6)

// byteCost is what n bytes cost at rate, in nanoseconds.
func byteCost(n int, rate ByteRate) int64 { return int64(n) * 1e9 / int64(rate) }

// byteRoom is how many bytes bucket tat at rate lets pass at now (0 or
// less: none), and, when that is under the quantum, when to look again.
func byteRoom(tat int64, rate ByteRate, now int64) (room int64, at int64) {
	t := max(tat, now)
	if t-now < paceWindow {
		room = (paceWindow - (t - now)) * int64(rate) / 1e9
	}
	q := min(max(paceQuantum, int64(rate)*paceTick/1e9), max(int64(rate)*paceWindow/2e9, 1))
	if room >= q {
		return room, 0
	}
	return room, t - paceWindow + q*1e9/int64(rate)
}

// pacing is a stream's limiter state, on every engine: its own buckets
// for UploadRate and DownloadRate, and the client's slot holding the
// buckets its connections share (ClientUploadRate, ClientDownloadRate),
// pinned while the stream lives. Times are mono nanoseconds. It holds
// no pointer but the slot's, which a process handed the stream can find
// again by the client's address.
type pacing struct {
	tat    [2]int64    // the stream's own bucket each way (up, down)
	wait   [2]int64    // when a waiting direction looks again; 0: not waiting
	since  [2]int64    // when that wait began, for the time paced
	end    int64       // when MaxDuration ends the stream; 0: never
	on     [2]bool     // the directions paced
	client *clientSlot // the shared buckets; nil without client rates
}

// Directions of pacing.
const (
	dirUp   = 0 // client to target
	dirDown = 1 // target to client
)

// rates returns r's own and per-client rates in direction d.
func (r *Route) rates(d int) (own, client ByteRate) {
	if d == dirUp {
		return r.UploadRate, r.ClientUploadRate
	}
	return r.DownloadRate, r.ClientDownloadRate
}

// startPacing sets the stream's limits up as it starts relaying at now:
// its MaxDuration deadline, which directions are paced and, with client
// rates, its client's slot.
func (st *stream) startPacing(now int64) {
	r := st.cfg
	if r.MaxDuration > 0 {
		st.pace.end = st.start + int64(r.MaxDuration)
	}
	if r.ClientUploadRate > 0 || r.ClientDownloadRate > 0 {
		st.pace.client = st.rt.clientTable().pin(st.src.Addr(), now)
	}
	st.pace.on = [2]bool{r.UploadRate > 0 || r.ClientUploadRate > 0, r.DownloadRate > 0 || r.ClientDownloadRate > 0}
}

// stopPacing gives back what startPacing took.
func (st *stream) stopPacing() {
	if s := st.pace.client; s != nil {
		st.rt.clientTable().unpin(s)
		st.pace.client = nil
	}
}

// paceRoom is how many bytes (up to most) paced direction d may move at
// now; 0 when it must wait, and then it is waiting until st.pace.wait[d].
func (st *stream) paceRoom(d, most int, now int64) int {
	p := &st.pace
	own, client := st.cfg.rates(d)
	room, at := int64(most), int64(0)
	if own > 0 {
		room, at = byteRoom(p.tat[d], own, now)
		room = min(room, int64(most))
	}
	if client > 0 {
		ct := st.rt.clientTable()
		c, cat := byteRoom(ct.tat(p.client, d), client, now)
		room, at = min(room, c), max(at, cat)
	}
	if at != 0 || room <= 0 {
		p.wait[d], p.since[d] = max(at, now+1), now
		return 0
	}
	return int(room)
}

// paced charges n bytes moved in paced direction d at now.
func (st *stream) paced(d, n int, now int64) {
	if n <= 0 {
		return
	}
	p := &st.pace
	own, client := st.cfg.rates(d)
	if own > 0 {
		p.tat[d] = max(p.tat[d], now) + byteCost(n, own)
	}
	if client > 0 {
		st.rt.clientTable().charge(p.client, d, byteCost(n, client), now)
	}
	st.rt.st.pacedBytes.Add(uint64(n))
}

// resumePacing ends direction d's wait at now, counting the time it
// waited.
func (st *stream) resumePacing(d int, now int64) {
	p := &st.pace
	if p.wait[d] == 0 {
		return
	}
	st.rt.st.pacedNanos.Add(uint64(max(now-p.since[d], 0)))
	p.wait[d] = 0
}

// The per-client table of a route holds, for each client address
// recently seen, its bucket of new connections (ConnRatePerClient) and
// the buckets its connections share (ClientUploadRate,
// ClientDownloadRate). It is a fixed array of sets of clientWays slots,
// a client's set chosen by a keyed hash of its address (so that a
// client cannot aim at another's set), each set under its own lock: it
// never grows, and finding a client allocates nothing. A client not in
// its set takes a free slot (one whose buckets are all full again, and
// that no connection pins, is as good as free: forgetting it loses
// nothing), else the least recently seen one that no connection pins;
// if every slot of the set is pinned, the client shares the least
// recently seen one, buckets and all. So only a flood of new addresses
// filling a set within a period can make the table forget a client
// still over its rate, and a client is never limited less than its
// byte rates while its connections live (at worst, more: shared).
const (
	clientSets = 1024
	clientWays = 8
)

type clientTable struct {
	seed maphash.Seed
	sets [clientSets]clientSet
}

type clientSet struct {
	mu    sync.Mutex
	slots [clientWays]clientSlot
}

type clientSlot struct {
	ip   [16]byte // the client's address, as As16
	used bool
	pins int32    // streams holding the slot for their shared rates
	seen int64    // mono when last used
	conn int64    // the bucket of new connections
	tat  [2]int64 // the shared byte buckets, up and down
	set  *clientSet
}

// clientTable returns the route's per-client table, made when first
// needed: a route with no per-client rate has none.
func (l *load) clientTable() *clientTable {
	if t := l.rateClients.Load(); t != nil {
		return t
	}
	t := &clientTable{seed: maphash.MakeSeed()}
	for i := range t.sets {
		for j := range t.sets[i].slots {
			t.sets[i].slots[j].set = &t.sets[i]
		}
	}
	if !l.rateClients.CompareAndSwap(nil, t) {
		return l.rateClients.Load()
	}
	return t
}

// find returns ip's slot in set s, taking one for it if it has none
// (see clientTable). s is locked.
func (t *clientTable) find(s *clientSet, ip [16]byte, now int64) *clientSlot {
	var free, old *clientSlot
	for i := range s.slots {
		c := &s.slots[i]
		switch {
		case c.used && c.ip == ip:
			c.seen = now
			return c
		case !c.used || c.pins == 0 && c.full(now):
			if free == nil {
				free = c
			}
		case old == nil || evictsBefore(c, old):
			old = c
		}
	}
	if free == nil && old.pins == 0 {
		free = old
	}
	if free == nil {
		old.seen = now
		return old // every slot pinned: share one
	}
	*free = clientSlot{ip: ip, used: true, seen: now, set: s}
	return free
}

// full reports whether c's buckets are all full at now: forgetting the
// slot then loses nothing.
func (c *clientSlot) full(now int64) bool {
	return c.conn <= now && c.tat[0] <= now && c.tat[1] <= now
}

// evictsBefore reports whether slot c is to be given up before o: an
// unpinned slot before a pinned one, then the least recently seen.
func evictsBefore(c, o *clientSlot) bool {
	if (c.pins == 0) != (o.pins == 0) {
		return c.pins == 0
	}
	return c.seen < o.seen
}

// set returns ip's set, locked.
func (t *clientTable) set(ip [16]byte) *clientSet {
	s := &t.sets[maphash.Bytes(t.seed, ip[:])%clientSets]
	s.mu.Lock()
	return s
}

// takeConn takes a new connection of ip under rate at now, and reports
// whether ip is within its rate.
func (t *clientTable) takeConn(ip netip.Addr, rate ConnRate, now int64) bool {
	k := ip.As16()
	s := t.set(k)
	defer s.mu.Unlock()
	c := t.find(s, k, now)
	return gcraTake(&c.conn, now, int64(rate.Per)/int64(rate.N), int64(rate.Per))
}

// pin returns ip's slot, held for a stream's shared rates until unpin.
func (t *clientTable) pin(ip netip.Addr, now int64) *clientSlot {
	k := ip.As16()
	s := t.set(k)
	defer s.mu.Unlock()
	c := t.find(s, k, now)
	c.pins++
	return c
}

// unpin gives back a slot pin returned.
func (t *clientTable) unpin(c *clientSlot) {
	c.set.mu.Lock()
	c.pins--
	c.set.mu.Unlock()
}

// tat returns c's shared bucket in direction d.
func (t *clientTable) tat(c *clientSlot, d int) int64 {
	c.set.mu.Lock()
	defer c.set.mu.Unlock()
	return c.tat[d]
}

// charge adds cost to c's shared bucket in direction d, at now.
func (t *clientTable) charge(c *clientSlot, d int, cost, now int64) {
	c.set.mu.Lock()
	c.tat[d] = max(c.tat[d], now) + cost
	c.seen = now
	c.set.mu.Unlock()
}

// withinRate takes a new connection (UDP: session) of client under r's
// ConnRatePerClient, and reports whether it is within it; if not, it
// adds n to c and logs it, as pauseLog paces the lines: a client over
// its rate connects often, and must not write a line each time. A
// client without an IP address (a Unix socket's) is not limited.
func (rt *route) withinRate(r *Route, client netip.AddrPort, c *atomic.Uint64, n uint64) bool {
	ip := client.Addr()
	if r.ConnRatePerClient.N == 0 || !ip.IsValid() {
		return true
	}
	if rt.clientTable().takeConn(ip, r.ConnRatePerClient, mono()) {
		return true
	}
	c.Add(n)
	switch begins, k := rt.rateLog.note(); {
	case begins && r.Listen.Datagram():
		rt.srv.log.Warn("UDP client over its session rate; its datagrams are dropped", "route", rt.name, "client", client, "rate", r.ConnRatePerClient.String())
	case begins:
		rt.srv.log.Warn("client over its connection rate; closed", "route", rt.name, "client", client, "rate", r.ConnRatePerClient.String())
	case k > 0:
		rt.srv.log.Warn("clients still over their connection rate", "route", rt.name, "refused", k)
	}
	return false
}

// rateCounters are a route's counters of its rate limits.
type rateCounters struct {
	rateLimited    atomic.Uint64 // stream clients over ConnRatePerClient
	udpRateLimited atomic.Uint64 // UDP datagrams that would start a session over it
	pacedBytes     atomic.Uint64 // bytes moved by paced directions
	pacedNanos     atomic.Uint64 // time paced directions waited
	maxDurations   atomic.Uint64 // streams (UDP: sessions) ended by MaxDuration
	pacedDrops     atomic.Uint64 // UDP datagrams dropped beyond a paced session's queue
}
