package relay

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/zeroio/zeroio/internal/quichello"
	"github.com/zeroio/zeroio/internal/tlshello"
	"github.com/zeroio/zeroio/udp"
)

// What a front holds of a client whose QUIC ClientHello is not whole yet.
// A hello with a post-quantum key share takes two datagrams, which may
// arrive in either order; the bounds leave room for a retransmission and
// no more. A client past them, or still without a whole hello after
// holdTimeout, goes to the default route with what it sent.
const (
	holdDatagrams = 4       // per client
	holdBytes     = 8 << 10 // per client, of datagrams held
	holdClients   = 1024    // per front: at most holdClients*holdBytes held
)

// holdTimeout is how long a client's datagrams are held for its hello to
// complete: a client whose second datagram was lost sends it again within
// its first probe timeout (RFC 9002, 6.2.2: about a second at most).
var holdTimeout = 2 * time.Second // a variable for tests

// heldHello is a client's hello so far and the datagrams it came in.
type heldHello struct {
	hello quichello.Hello
	info  tlshello.Info
	ln    *udp.Conn // the socket its first datagram came to
	peer  peer
	dgs   [][]byte // copies, in the order they came
	bytes int
	since int64
}

// holdState is a front's held clients.
type holdState struct {
	f        *udpFront
	mu       sync.Mutex
	m        map[sessionKey]*heldHello
	timer    *time.Timer // runs expire while clients are held
	armed    bool
	closed   bool
	expiring sync.WaitGroup // an expire under way; close waits for it
}

// add takes a datagram of a client without a session: it returns the
// session the datagram goes to once the client's route is known (the
// datagrams held before it have been sent on), or nil while it is held
// or when it is dropped.
func (h *holdState) add(t *routeTable, ln *udp.Conn, a *arrival, now int64) *session {
	f := h.f
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		f.st.dropped.Add(1)
		return nil
	}
	key := a.key()
	c := h.m[key]
	fresh := c == nil
	if fresh {
		// A datagram of a client already held goes after what it
		// holds, whatever it is.
		if reason := firstLook(a.payload); reason != "" {
			h.mu.Unlock()
			return f.unrouted(t, reason, ln, a, now, nil, 1)
		}
		if len(h.m) >= holdClients {
			h.mu.Unlock()
			return f.unrouted(t, unroutedHeldLimit, ln, a, now, nil, 1)
		}
		c = &heldHello{ln: ln, peer: a.peer, since: now}
		c.hello.MaxPackets = holdDatagrams
		c.hello.MaxLen = holdBytes
	}
	err := c.hello.Add(a.payload, &c.info)
	reason := ""
	switch {
	case err == nil:
	case err == quichello.ErrTooLarge || err == quichello.ErrTooMany:
		reason = unroutedTooLarge
	case fresh && err != quichello.ErrNeedMore && err != quichello.ErrNotInitial:
		// The first datagram decides that a client is not one whose
		// hello can be read; later ones may be forged or damaged
		// while the real ones still come (quichello.Hello.Add).
		reason = why(err)
	case len(c.dgs) == holdDatagrams || c.bytes+len(a.payload) > holdBytes:
		reason = unroutedTooLarge
	default:
		c.dgs = append(c.dgs, append([]byte(nil), a.payload...))
		c.bytes += len(a.payload)
		if fresh {
			if h.m == nil {
				h.m = map[sessionKey]*heldHello{}
			}
			h.m[key] = c
			h.arm()
		}
		h.mu.Unlock()
		return nil
	}
	if !fresh {
		delete(h.m, key)
	}
	h.mu.Unlock()
	if reason != "" {
		return f.unrouted(t, reason, ln, a, now, c.dgs, 1)
	}
	return f.matched(t, c, a, now)
}

// firstLook names why a datagram of a client without a session cannot
// begin a QUIC hello, or returns "" if it may: it looks at the header
// only, so that a flood of other traffic costs no allocation.
func firstLook(b []byte) string {
	if !quichello.IsLong(b) {
		return unroutedNotQUIC
	}
	lh, err := quichello.ParseLong(b)
	switch {
	case err == quichello.ErrVersion || err == nil && lh.Type == quichello.TypeUnknown:
		return unroutedVersion
	case err != nil:
		return unroutedMalformed
	}
	return ""
}

// why maps a quichello error to the reason a client is not routed by its
// hello.
func why(err error) string {
	switch err {
	case quichello.ErrNotQUIC:
		return unroutedNotQUIC
	case quichello.ErrVersion:
		return unroutedVersion
	case quichello.ErrDecrypt:
		return unroutedUndecryptable
	case quichello.ErrTooLarge, quichello.ErrTooMany:
		return unroutedTooLarge
	}
	return unroutedMalformed
}

// arm, with h.mu held, starts the timer that ends holds, unless it runs.
func (h *holdState) arm() {
	if h.armed {
		return
	}
	h.armed = true
	if h.timer == nil {
		h.timer = time.AfterFunc(holdTimeout, h.expire)
		return
	}
	h.timer.Reset(holdTimeout)
}

// expire sends the clients held for holdTimeout to the default route.
func (h *holdState) expire() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.expiring.Add(1)
	defer h.expiring.Done()
	now := time.Now().UnixNano()
	var due []*heldHello
	next := int64(-1)
	for k, c := range h.m {
		switch left := c.since + int64(holdTimeout) - now; {
		case left <= 0:
			due = append(due, c)
			delete(h.m, k)
		case next < 0 || left < next:
			next = left
		}
	}
	h.armed = next >= 0
	if h.armed {
		h.timer.Reset(time.Duration(next))
	}
	h.mu.Unlock()
	t := h.f.table.Load()
	for _, c := range due {
		a := arrival{peer: c.peer, payload: c.dgs[0]}
		h.f.unrouted(t, unroutedTimeout, c.ln, &a, now, c.dgs, 0)
	}
}

// close drops what h holds and stops its timer.
func (h *holdState) close() {
	h.mu.Lock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.m = nil
	h.mu.Unlock()
	h.expiring.Wait()
}

// count is the number of clients held.
func (h *holdState) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// matched opens the session of c, whose hello is whole, on the route its
// hello chooses, and sends on what it held; a is its latest datagram,
// which the caller sends on to the session returned.
func (f *udpFront) matched(t *routeTable, c *heldHello, a *arrival, now int64) *session {
	rt, _ := t.choose(&c.info, nil)
	if rt == nil {
		f.st.unmatched.Add(1)
		f.logUnrouted(unroutedUnmatched, a.who(), string(c.info.ServerName()), false)
	}
	return f.open(rt, c.ln, a, now, c.dgs, 1)
}

// unrouted sends a client whose datagrams chose no route by a hello, for
// reason, to t's default route with held, the datagrams held before a
// (dropping them all if there is no default). extra is 1 when the caller
// sends a on to the session returned, 0 when a is the last of held.
func (f *udpFront) unrouted(t *routeTable, reason string, ln *udp.Conn, a *arrival, now int64, held [][]byte, extra uint64) *session {
	f.st.of(reason).Add(1)
	rt := t.match(nil)
	f.logUnrouted(reason, a.who(), "", rt != nil)
	return f.open(rt, ln, a, now, held, extra)
}

// logUnrouted logs a client not routed by its hello, as f.log paces it:
// the first of an episode, then a count every 30 s while they go on, the
// others at debug level.
func (f *udpFront) logUnrouted(reason string, client netip.AddrPort, sni string, toDefault bool) {
	log := f.srv.log
	args := []any{"listen", f.key, "client", client, "reason", reason, "default_route", toDefault}
	if sni != "" {
		args = append(args, "sni", sni)
	}
	switch begins, n := f.log.note(); {
	case begins:
		log.Info("UDP client not routed by a QUIC ClientHello", args...)
	case n > 0:
		log.Info("UDP clients still not routed by a QUIC ClientHello", "listen", f.key, "clients", n)
	case log.Enabled(context.Background(), slog.LevelDebug):
		log.Debug("UDP client not routed by a QUIC ClientHello", args...)
	}
}
