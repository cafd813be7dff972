package relay

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// dialTarget connects a client to one of the route's targets with
// blocking dials, along a dialPlan: each attempt within the time the
// plan gives it, the failed ones marking their target down, until one
// answers or the plan has no target left. ctx ends the dial early
// (Close, Shutdown's deadline); a dial cut short so does not count
// against the target. The goroutine engine dials so.
func (rt *route) dialTarget(ctx context.Context, r *Route, client netip.Addr) (net.Conn, *backend, error) {
	var p dialPlan
	p.start(rt, r, client, mono())
	d := net.Dialer{KeepAlive: -1, Resolver: streamResolver} // no keep-alive unless asked: no setsockopt
	if r.KeepAlive > 0 {
		d.KeepAliveConfig = keepAlive(r)
	}
	var lastErr error = errNoTarget
	for {
		now := mono()
		b, end := p.next(now)
		if b == nil {
			return nil, nil, lastErr
		}
		d.Deadline = time.Time{}
		if end != 0 {
			d.Deadline = time.Now().Add(time.Duration(end - now))
		}
		c, err := dialOne(ctx, &d, b, &p)
		if err == nil && rt.srv.dialsSelf(c) {
			c.Close()
			c, err = nil, errLoop
		}
		if err == nil {
			return c, p.connected(), nil
		}
		if ctx.Err() != nil || exhausted(err) {
			p.abandon()
			return nil, b, err // not the target's fault
		}
		p.failed(err)
		lastErr = err
	}
}

// dialOne dials b. Out of descriptors or memory, which is no fault of
// the target, it waits for them (dialPlan.waitFD, as long as ctx allows)
// and dials again, rather than mark the target down or drop the client.
func dialOne(ctx context.Context, d *net.Dialer, b *backend, p *dialPlan) (net.Conn, error) {
	for {
		c, err := d.DialContext(ctx, b.network, b.address)
		if err == nil || !exhausted(err) {
			return c, err
		}
		wait, ok := p.waitFD(mono())
		if !ok {
			return nil, err
		}
		t := time.NewTimer(time.Duration(wait))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// targets returns the route's current target set.
func (rt *route) targets() *targetSet { return rt.load.targets.Load() }
