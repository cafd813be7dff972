package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// errNoTarget is a dial's error when the route has no target left to try.
var errNoTarget = errors.New("relay: no target left to try")

// dialTarget connects a client to one of the route's targets, as every
// blocking engine does: pick a target, dial it within its share of
// what is left of r.DialTimeout, and on a failure mark it down and try
// the next, until one answers or none is left. Each attempt may take the
// time left divided by the number of targets left to try, so that a
// target that never answers cannot use up the time another would have
// answered in; with one target it gets the whole DialTimeout (0: no
// bound but ctx). ctx ends the dial early (Close, Shutdown's deadline);
// a dial cut short so does not count against the target.
// streamResolver looks up the host names of stream targets, for every
// engine; tests replace it to give a name several addresses.
var streamResolver = net.DefaultResolver

func (rt *route) dialTarget(ctx context.Context, r *Route, client netip.Addr) (net.Conn, *backend, error) {
	ts := rt.targets()
	var deadline time.Time
	if r.DialTimeout > 0 {
		deadline = time.Now().Add(r.DialTimeout)
	}
	d := net.Dialer{KeepAlive: -1, Resolver: streamResolver} // no keep-alive unless asked: no setsockopt
	if r.KeepAlive > 0 {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: r.KeepAlive}
	}
	left := ts.npos
	var tried triedSet
	var lastErr error = errNoTarget
	for ; left > 0; left-- {
		b := ts.pick(client, &tried)
		if b == nil {
			break
		}
		d.Deadline = time.Time{}
		if !deadline.IsZero() {
			rem := time.Until(deadline)
			if rem <= 0 {
				break
			}
			d.Deadline = time.Now().Add(rem / time.Duration(left))
		}
		b.dialing.Add(1)
		c, err := rt.dialOne(ctx, &d, b, deadline)
		b.dialing.Add(-1)
		if err == nil && rt.srv.dialsSelf(c) {
			c.Close()
			b.loops.Store(true)
			c, err = nil, errLoop
		}
		if err == nil {
			b.dialOK()
			return c, b, nil
		}
		if ctx.Err() != nil || exhausted(err) {
			return nil, b, err // not the target's fault
		}
		b.dialFailed(err)
		lastErr = err
		rt.srv.log.Debug("dial failed; trying another target", "route", rt.name, "target", b.addr.String(), "err", err)
	}
	return nil, nil, lastErr
}

// dialOne dials b. Out of descriptors or memory, which is no fault of
// the target, it waits for them (5 ms doubling to 100 ms, as long as the
// dial timeout and ctx allow) and dials again, rather than mark the
// target down or drop the client.
func (rt *route) dialOne(ctx context.Context, d *net.Dialer, b *backend, deadline time.Time) (net.Conn, error) {
	wait := 5 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, b.network, b.address)
		if err == nil || !exhausted(err) {
			return c, err
		}
		if !deadline.IsZero() && time.Until(deadline) < wait {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// targets returns the route's current target set.
func (rt *route) targets() *targetSet { return rt.load.targets.Load() }
