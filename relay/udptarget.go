package relay

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"time"
)

// udpTarget is a route's target address, resolved.
type udpTarget struct {
	network string
	addr    netip.AddrPort
	from    Addr  // as configured
	byName  bool  // from names a host, not an IP address: look it up again
	at      int64 // unix nanoseconds of the lookup
	err     error // the lookup failed: no address yet, the target is down
}

// udpAddrs are a UDP route's targets resolved, by configured address.
type udpAddrs map[Addr]*udpTarget

// resolved is a route's targets looked up ahead of their use, or the
// error that gave.
type resolved struct {
	to  udpAddrs
	err error
}

// get returns the targets of r: res's if res is not nil, else resolved
// now.
func (res *resolved) get(r *Route) (udpAddrs, error) {
	if res == nil {
		return resolveTargets(r, nil)
	}
	return res.to, res.err
}

// resolveTargets looks up each target of r, taking those known has as
// they are. A target that does not resolve is kept without an address:
// it is down, and looked up again in the background (targetFor), while
// the route serves with the others; the route starts even when none
// resolves, as it does when no target answers (start-up never depends
// on a backend). The error is for an address that is not host:port.
func resolveTargets(r *Route, known udpAddrs) (udpAddrs, error) {
	out := udpAddrs{}
	for _, t := range r.Targets {
		if t.dynamic() {
			continue // its backends are IP addresses (discover.go)
		}
		if tg := known[t.Addr]; tg != nil {
			out[t.Addr] = tg
			continue
		}
		if _, _, err := net.SplitHostPort(t.Addr.Address); err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Addr, err)
		}
		tg, err := lookupTarget(t.Addr)
		if err != nil {
			tg = &udpTarget{network: t.Addr.Network, from: t.Addr, byName: true, at: time.Now().UnixNano(), err: err}
		}
		out[t.Addr] = tg
	}
	return out, nil
}

// noteUnresolved marks down, and so logs, the targets of u whose host
// name did not resolve, and says so when none did.
func (u *udpRoute) noteUnresolved() {
	to := *u.to.Load()
	ts := u.rt.targets()
	n := 0
	var now int64
	for _, b := range ts.bs {
		tg := to[b.addr]
		if tg == nil || tg.err == nil {
			continue
		}
		n++
		if !b.isDown(&now) {
			b.markDown("host name does not resolve", tg.err)
		}
	}
	if n > 0 && n == len(ts.bs) {
		u.rt.srv.log.Warn("no target of the UDP route resolves; its datagrams are dropped until one does", "route", u.rt.name, "targets", ts.String())
	}
}

// lookupTarget resolves a UDP target as resolveTarget does, within
// resolveTimeout, to the first of its addresses.
func lookupTarget(t Addr) (*udpTarget, error) {
	aps, byName, err := resolveTarget(context.Background(), t, resolveTimeout)
	if err != nil {
		return nil, err
	}
	return &udpTarget{network: t.Network, addr: aps[0], from: t, byName: byName, at: time.Now().UnixNano()}, nil
}

// targetFor returns the address of b, the target a session opening at now
// goes to (nil if a reload just dropped it). A target given by host name
// is looked up again in the background once resolveEvery has passed
// since the last lookup; sessions go to the last address meanwhile.
//
// A target whose name did not resolve has no address: targetFor returns
// nil, and if b's down mark has run out (pick gave it as up, not as a
// last resort), looks the name up again in the background, marking b
// down meanwhile, so that the lookups back off as failed dials do.
func (u *udpRoute) targetFor(b *backend, now int64) *udpTarget {
	if b.udp != nil {
		return b.udp // discovered: an IP address
	}
	tg := (*u.to.Load())[b.addr]
	if tg != nil && tg.err != nil {
		if !b.isDown(&now) && b.resolving.CompareAndSwap(false, true) {
			b.markDown("host name does not resolve", tg.err)
			u.rt.srv.serveWG.Add(1)
			go u.refresh(b, tg)
		}
		return nil
	}
	if tg != nil && tg.byName && now-tg.at >= int64(resolveEvery) && b.resolving.CompareAndSwap(false, true) {
		u.rt.srv.serveWG.Add(1)
		go u.refresh(b, tg)
	}
	return tg
}

// refresh looks old's host name up again and makes the answer b's
// address, unless a reload changed it meanwhile. On an error the route
// keeps the address it had, and tries again after resolveEvery; a name
// that never resolved stays down, and is tried again when b's down mark
// runs out. A name that resolves at last brings b up.
func (u *udpRoute) refresh(b *backend, old *udpTarget) {
	defer u.rt.srv.serveWG.Done()
	defer b.resolving.Store(false)
	tg, err := lookupTarget(old.from)
	log := u.rt.srv.log
	switch {
	case err != nil:
		again := *old
		again.at = time.Now().UnixNano()
		if old.err != nil {
			again.err = err
			log.Debug("UDP target still does not resolve", "route", u.rt.name, "target", old.from.String(), "err", err)
		} else {
			log.Warn("UDP target lookup failed; keeping its last address", "route", u.rt.name, "target", old.from.String(), "addr", old.addr, "err", err)
		}
		tg = &again
	case old.err != nil:
		log.Info("UDP target resolved", "route", u.rt.name, "target", old.from.String(), "addr", tg.addr)
	case tg.addr != old.addr:
		log.Info("UDP target moved", "route", u.rt.name, "target", old.from.String(), "from", old.addr, "to", tg.addr)
	}
	for {
		cur := u.to.Load()
		if (*cur)[old.from] != old {
			return // a reload changed it
		}
		next := make(udpAddrs, len(*cur))
		maps.Copy(next, *cur)
		next[old.from] = tg
		if u.to.CompareAndSwap(cur, &next) {
			if old.err != nil && tg.err == nil {
				b.markUp("host name resolved")
			}
			return
		}
	}
}
