package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/zeroio/zeroio/internal/sockaddr"
)

// A loop resolves targets as resolve.go says and keeps the sockaddr: IP
// literals and Unix paths for good, names for streamTTL. A name is looked
// up on a goroutine, so the loop never waits for DNS; the connections
// that need it wait in state stResolve, under their dial timer.

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
	r.expires = l.now + int64(streamTTL)
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

// literalSockaddr builds the sockaddr of a Unix path or an IP literal
// (literalTarget), with no lookup and no allocation.
func literalSockaddr(a Addr) (sockaddr.Addr, bool) {
	if a.Network == "unix" {
		return sockaddr.FromUnix(a.Address)
	}
	ap, ok := literalTarget(a)
	if !ok {
		return sockaddr.Addr{}, false
	}
	return sockaddr.FromAddrPort(ap), true
}

// lookup resolves a target as resolveTarget does, within timeout (0:
// none), into the sockaddr to connect to first and the others, tried in
// turn when a connect fails.
func lookup(a Addr, timeout time.Duration) (sockaddr.Addr, []sockaddr.Addr, error) {
	if a.Network == "unix" {
		return sockaddr.Addr{}, nil, fmt.Errorf("unix socket path %q too long", a.Address)
	}
	aps, _, err := resolveTarget(context.Background(), a, timeout)
	if err != nil {
		return sockaddr.Addr{}, nil, err
	}
	all := make([]sockaddr.Addr, 0, len(aps))
	for _, ap := range aps {
		if ap.Addr().Zone() == "" { // a sockaddr here carries no zone
			all = append(all, sockaddr.FromAddrPort(ap))
		}
	}
	if len(all) == 0 {
		return sockaddr.Addr{}, nil, fmt.Errorf("no usable address for %s", a.Address)
	}
	return all[0], all[1:], nil
}
