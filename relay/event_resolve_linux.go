package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/zeroio/zeroio/internal/sockaddr"
)

// A loop resolves targets once and keeps the sockaddr: IP literals and
// Unix paths for good, names for resolvedTTL (package net's dialer, which
// the goroutine engine uses, asks the resolver on every dial; the system
// resolver's own caching, if any, is below both). A name is looked up on
// a goroutine, so the loop never waits for DNS; the connections that
// need it wait in state stResolve, under their dial timer.
const resolvedTTL = 5 * time.Second

// maxTargetAddrs bounds a loop's cache of resolved targets. Reloads that
// change target addresses would otherwise grow it for good; past the
// bound, the entries no lookup is pending for are dropped, and come back
// at their next dial.
const maxTargetAddrs = 1024

type targetAddr struct {
	sa      sockaddr.Addr
	more    []sockaddr.Addr // a name's other addresses, tried in turn when a connect fails
	err     error
	expires int64 // 0: never
	pending bool
	waiters []connRef
}

// connRef names a connection across its slot's reuse.
type connRef struct {
	idx int32
	seq uint32 // the connection's cseq
}

// resolve returns the sockaddr of a, or reports that a lookup is under
// way, after which c is resumed (connectTo or dialFailed).
func (l *loop) resolve(a Addr, c *evConn) (sa *sockaddr.Addr, err error, pending bool) {
	if l.targets == nil {
		l.targets = map[Addr]*targetAddr{}
	}
	r := l.targets[a]
	if r != nil && r.pending {
		r.waiters = append(r.waiters, connRef{c.idx, c.cseq})
		return nil, nil, true
	}
	if r != nil && (r.expires == 0 || l.now < r.expires) {
		return &r.sa, r.err, false
	}
	if r == nil {
		if len(l.targets) >= maxTargetAddrs {
			for k, v := range l.targets {
				if !v.pending {
					delete(l.targets, k)
				}
			}
		}
		r = &targetAddr{}
		l.targets[a] = r
	}
	if sa, ok := literalSockaddr(a); ok {
		*r = targetAddr{sa: sa}
		return &r.sa, nil, false
	}
	r.pending, r.err = true, nil
	r.waiters = append(r.waiters[:0], connRef{c.idx, c.cseq})
	timeout := c.plan.lookupTimeout(l.now)
	go func() {
		sa, more, err := lookup(a, timeout)
		l.post(func() { l.resolved(a, sa, more, err) })
	}()
	return nil, nil, true
}

// resolved stores a lookup's answer and resumes the connections that
// waited for it.
func (l *loop) resolved(a Addr, sa sockaddr.Addr, more []sockaddr.Addr, err error) {
	r := l.targets[a]
	if r == nil {
		return
	}
	r.sa, r.more, r.err, r.pending = sa, more, err, false
	r.expires = l.now + int64(resolvedTTL)
	ws := r.waiters
	r.waiters = nil
	for _, w := range ws {
		if int(w.idx) >= len(l.conns) {
			continue
		}
		c := l.conns[w.idx]
		// A connection whose attempt timed out while it waited may be
		// waiting for another target's name now.
		if c.cseq != w.seq || c.state != stResolve || c.b.addr != a {
			continue
		}
		if err != nil {
			c.attemptFailed(err)
		} else {
			c.connectTo(&r.sa)
		}
	}
}

// literalSockaddr builds the sockaddr of a Unix path or an IP literal.
func literalSockaddr(a Addr) (sockaddr.Addr, bool) {
	if a.Network == "unix" {
		return sockaddr.FromUnix(a.Address)
	}
	ap, err := netip.ParseAddrPort(a.Address)
	if err != nil || ap.Addr().Zone() != "" {
		return sockaddr.Addr{}, false
	}
	return sockaddr.FromAddrPort(ap), true
}

// maxAddrs bounds the addresses of one name a connection tries.
const maxAddrs = 8

// lookup resolves, within timeout (0: none), a host:port target to its addresses, IPv4 first for
// "tcp" (as the goroutine engine's dialer tries IPv4 addresses first on
// the usual systems): the first, and the others in the resolver's order,
// which a connection tries in turn when a connect fails, as package net's
// dialer does.
func lookup(a Addr, timeout time.Duration) (sockaddr.Addr, []sockaddr.Addr, error) {
	if a.Network == "unix" {
		return sockaddr.Addr{}, nil, fmt.Errorf("unix socket path %q too long", a.Address)
	}
	host, ps, err := net.SplitHostPort(a.Address)
	if err != nil {
		return sockaddr.Addr{}, nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		p, perr := net.LookupPort("tcp", ps)
		if perr != nil {
			return sockaddr.Addr{}, nil, perr
		}
		port = uint64(p)
	}
	ctx := context.Background()
	if timeout > 0 { // else the dial has no bound (Never)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	nw := "ip"
	switch a.Network {
	case "tcp4":
		nw = "ip4"
	case "tcp6":
		nw = "ip6"
	}
	ips, err := streamResolver.LookupNetIP(ctx, nw, host)
	if err != nil {
		return sockaddr.Addr{}, nil, err
	}
	var v4, v6 []sockaddr.Addr
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.Zone() != "" {
			continue
		}
		sa := sockaddr.FromAddrPort(netip.AddrPortFrom(ip, uint16(port)))
		if ip.Is4() {
			v4 = append(v4, sa)
		} else {
			v6 = append(v6, sa)
		}
	}
	all := append(v4, v6...)
	if len(all) == 0 {
		return sockaddr.Addr{}, nil, fmt.Errorf("no usable address for %s", host)
	}
	return all[0], all[1:min(len(all), maxAddrs)], nil
}
