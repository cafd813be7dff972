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
	d := net.Dialer{KeepAlive: -1} // no keep-alive unless asked: no setsockopt
	if r.KeepAlive > 0 {
		d.KeepAliveConfig = keepAlive(r)
	}
	var lastErr error = errNoTarget
	for {
		b, end := p.next(mono())
		if b == nil {
			return nil, nil, lastErr
		}
		c, err := dialAttempt(ctx, &d, b, &p, end)
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

// dialAttempt dials b within an attempt that must end at end (mono; 0:
// no bound): a Unix path at once, a host:port at its addresses
// (resolveTarget, waited for here) in turn until one answers, each with
// its share of the time, as the event engine's connectTo and nextAddr
// give it.
func dialAttempt(ctx context.Context, d *net.Dialer, b *backend, p *dialPlan, end int64) (net.Conn, error) {
	if b.network == "unix" {
		return dialOne(ctx, d, b.network, b.address, p, end)
	}
	lctx := ctx // the lookup, too, ends with the attempt
	if end != 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithDeadline(ctx, wallAt(end))
		defer cancel()
	}
	aps, _, err := resolveTarget(lctx, b.addr, p.lookupTimeout(mono()))
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: b.network, Err: err}
	}
	for i, ap := range aps {
		now := mono()
		if i > 0 {
			if !p.timeLeft(now) {
				break
			}
			end = p.share(now)
		}
		var c net.Conn
		c, err = dialOne(ctx, d, b.network, ap.String(), p, addrShare(now, end, len(aps)-1-i))
		if err == nil || ctx.Err() != nil || exhausted(err) {
			return c, err
		}
	}
	return nil, err
}

// dialOne dials address, by the time end (mono; 0: no bound). Out of
// descriptors or memory, which is no fault of the target, it waits for
// them (dialPlan.waitFD, as long as ctx allows) and dials again, rather
// than mark the target down or drop the client.
func dialOne(ctx context.Context, d *net.Dialer, network, address string, p *dialPlan, end int64) (net.Conn, error) {
	d.Deadline = time.Time{}
	if end != 0 {
		d.Deadline = wallAt(end)
	}
	for {
		c, err := d.DialContext(ctx, network, address)
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

// wallAt is the wall-clock time of the mono time t.
func wallAt(t int64) time.Time { return time.Now().Add(time.Duration(t - mono())) }

// targets returns the route's current target set.
func (rt *route) targets() *targetSet { return rt.load.targets.Load() }
