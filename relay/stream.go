package relay

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/internal/tlshello"
)

// A relayed stream goes through the same steps on every engine:
//
//	accepted   a front's listener took the client (its server slot for a
//	           hello: peek; else its route's slots: take)
//	proxy in   trustsPeer, then gotProxy or proxyFailed
//	hello      chose: the ClientHello picks the route, which takes over
//	           the hello's server slot (take)
//	policy     admitClient: access lists and the per-client limit
//	dial       a dialPlan picks each target and the time it may take
//	prelude    the outgoing PROXY header, then the bytes the hello read
//	relay      bytes move; idle ends it after the route's IdleTimeout
//	end        end: the end reason, the counters, the connection log,
//	           and the slots given back (release)
//
// stream holds what those steps decide, and its methods are the steps:
// an engine calls them as its connection reaches each, and decides only
// how it waits (blocking reads under deadlines, or epoll readiness in a
// loop) and how bytes move. A step added here runs on every engine.
type stream struct {
	id    uint64 // Server.newStreamID
	rt    *route // nil until a route took the client (and its slots)
	cfg   *Route // rt's settings, or the front's until then
	front *front // the front of a client whose route its hello chooses

	// src is the client, and dst the address it reached, as its socket
	// or its PROXY header gives them; dst is read from the socket only
	// if needed (dstKnown).
	src, dst  netip.AddrPort
	dstKnown  bool
	proxied   bool // the client's PROXY header was read
	perClient bool // took a slot under MaxConnsPerClient
	peekSlot  bool // holds a server slot for its hello (Server.admitPeek)
	relaying  bool // connected to its target: the end counts a relay

	b          *backend  // the target dialled (and relayed to, once relaying)
	start      int64     // mono when accepted
	upN, downN uint64    // bytes each way, for the target's counters and the log
	endFirst   endReason // which side's EOF came first
	endWhy     endReason // set when the end is known before the relay: no target, a reset
	pace       pacing    // rate limits and MaxDuration, once relaying
}

// trustsPeer reports whether r takes a PROXY header from peer: any
// peer, unless r lists TrustedProxies.
func trustsPeer(r *Route, peer netip.AddrPort) bool {
	return len(r.TrustedProxies) == 0 || peer.IsValid() && contains(r.TrustedProxies, peer.Addr())
}

// needsProxy reports whether the client's PROXY header is still to be
// read before the policy step.
func (st *stream) needsProxy() bool { return st.cfg.AcceptProxy && !st.proxied }

// proxyPeer reports whether the client may send a PROXY header; if not,
// it counts the refusal (for a front's client, before its route is
// known, on the front), and the caller closes the client.
func (st *stream) proxyPeer() bool {
	if trustsPeer(st.cfg, st.src) {
		return true
	}
	if st.rt == nil {
		st.front.st.untrusted.Add(1)
	} else {
		st.rt.st.denied.Add(1)
		st.debug("untrusted PROXY peer")
	}
	return false
}

// gotProxy takes the client's PROXY header: a PROXY command gives the
// client's address and the one it reached.
func (st *stream) gotProxy(h *proxyproto.Header) {
	st.proxied = true
	if h.Command == proxyproto.Proxy && h.Source.IsValid() {
		st.src, st.dst = unmapHeader(h.Source, h.Destination)
		st.dstKnown = true
	}
}

// proxyFailed counts and logs a PROXY header that could not be read
// (err), on the route or, before one is chosen, on the front; the caller
// closes the client.
func (st *stream) proxyFailed(err error) {
	if rt := st.rt; rt != nil {
		rt.st.errProxy.Add(1)
		rt.srv.badProxy(&rt.proxyLog, "route", rt.name, st.src, err)
		return
	}
	f := st.front
	f.st.proxyErrors.Add(1)
	f.srv.badProxy(&f.proxyLog, "listen", st.cfg.Listen.String(), st.src, err)
}

// helloFailed counts and logs a client whose hello chose no route (why,
// one of the hello outcomes; h, if not nil, the hello parsed); the
// caller closes it.
func (st *stream) helloFailed(why int, h *tlshello.Info) {
	st.front.reject(why, st.src, h)
}

// chose maps what tlshello.Parse said of the client's first bytes (err,
// never ErrNeedMore) to its route, out of t; nil when the client is to
// be closed, counted already.
func (st *stream) chose(t *routeTable, h *tlshello.Info, err error) *route {
	rt, why := t.choose(h, err)
	if rt == nil {
		st.helloFailed(why, h)
		return nil
	}
	rt.st.accepted.Add(1)
	return rt
}

// take gives the client a slot under rt's limits and the server's
// (for a client holding a server slot for its hello, the route takes
// that one over), and rt the client. It reports false when a limit is
// full: the engine then waits for a slot, or closes the client.
func (st *stream) take(rt *route) bool {
	r := rt.cfg.Load()
	var ok bool
	if st.peekSlot {
		ok = rt.admitHeld(r)
	} else {
		ok = rt.admit(r)
	}
	if ok {
		st.peekSlot = false
		st.rt, st.cfg = rt, r
	}
	return ok
}

// admitClient applies the route's access lists, per-client rate and limit to
// the client (as its PROXY header gives it, if any). On false, counted,
// the caller closes the client.
func (st *stream) admitClient() bool {
	rt, r := st.rt, st.cfg
	ip := st.src.Addr()
	if !allowed(r.Allow, r.Deny, ip) {
		rt.st.denied.Add(1)
		st.debug("client denied")
		return false
	}
	if !rt.withinRate(r, st.src, &rt.st.rateLimited, 1) {
		return false
	}
	ok, took := rt.takeClient(r, ip)
	st.perClient = took
	if !ok {
		rt.st.overLimit.Add(1)
		st.debug("client over its connection limit")
		return false
	}
	return true
}

// relayTo records that the stream is relayed to b, which its dial
// reached: the end counts a relay, on b too.
func (st *stream) relayTo(b *backend) {
	st.b, st.relaying = b, true
	b.connStart()
}

// release gives back the slots the stream holds: its route's (and the
// per-client one, if taken) or, for a client no route took, the server
// slot its hello held. It reports whether a slot freed.
func (st *stream) release() bool {
	if st.rt == nil {
		if st.peekSlot {
			st.peekSlot = false
			st.front.srv.unpeek()
			return true
		}
		return false
	}
	st.rt.releaseSlots(st.perClient, st.src.Addr())
	return true
}

// debug logs msg at debug level with the stream's route and client, if
// enabled: building the attributes would allocate on every connection.
func (st *stream) debug(msg string) {
	log := st.rt.srv.log
	if log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug(msg, "route", st.rt.name, "client", st.src)
	}
}
