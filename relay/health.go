package relay

import (
	"context"
	"net"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// Passive health: what a client's dial tells of a target.

// dialFailed marks b down after a failed or timed-out dial: for a
// backoff of 1 s doubling with each failure in a row up to 30 s, or,
// when active checks run, until they pass Rise times.
func (b *backend) dialFailed(err error) {
	b.dialFails.Add(1)
	b.markDown("dial failed", err)
}

// markDown marks b down as dialFailed does, for the reason why. A
// failure while b's mark runs (a dial under way when another client's
// failure marked it, or a last resort) leaves the mark as it is: the
// backoff doubles with each failure after a mark expired, not with each
// client that saw the target die.
func (b *backend) markDown(why string, err error) {
	if b.checked.Load() {
		b.failStreak.Add(1)
		b.rise.Store(0)
		b.downUntil.Store(noRetry)
	} else {
		now := time.Now()
		old := b.downUntil.Load()
		if old != 0 && now.UnixNano() < old {
			return
		}
		n := b.failStreak.Add(1)
		d := minBackoff << min(n-1, 5)
		if !b.downUntil.CompareAndSwap(old, now.Add(min(d, maxBackoff)).UnixNano()) {
			b.failStreak.Add(-1) // another failure marked it meanwhile
			return
		}
	}
	b.logState(b.rt.srv.log, true, why, err)
}

// dialOK clears a failed dial's mark: the target answers. Where active
// checks run, only Rise passed checks bring a target back, as HAProxy's
// do: a client's dial that connects to a target marked down (every
// target being down, or a connect that completed before another client's
// failed dial marked it down) leaves the mark, so that the target does
// not flap up and down while it dies.
func (b *backend) dialOK() {
	if b.checked.Load() && b.downUntil.Load() == noRetry {
		return
	}
	b.markUp("dial succeeded")
}

// markUp clears b's down mark, for the reason why.
func (b *backend) markUp(why string) {
	if b.failStreak.Load() == 0 && b.downUntil.Load() == 0 {
		return // the common case: no write to a shared line
	}
	b.failStreak.Store(0)
	b.downUntil.Store(0)
	b.loops.Store(false)
	b.logState(b.rt.srv.log, false, why, nil)
}

// Active health: a checker per target while the set is in use.

// startChecks runs a checker for each target that has none if the set
// has active checks, until the set's life ends or discovery drops the
// target, and the set's DNS discovery if it has dynamic targets. The
// goroutines count in the server's serveWG, so Shutdown waits for them.
func (ts *targetSet) startChecks(s *Server) {
	ts.life.startDiscovery()
	if ts.check.Interval <= 0 {
		return
	}
	l := ts.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return
	}
	for _, b := range ts.bs {
		if l.checks[b] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(l.ctx)
		l.checks[b] = cancel
		s.serveWG.Add(1)
		go func() {
			defer s.serveWG.Done()
			ts.checkLoop(ctx, b)
		}()
	}
}

// stopCheck stops b's checker, if one runs: discovery dropped b.
func (l *targetLife) stopCheck(b *backend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cancel := l.checks[b]; cancel != nil {
		cancel()
		delete(l.checks, b)
	}
}

func (ts *targetSet) checkLoop(ctx context.Context, b *backend) {
	c := ts.check
	rise, fall := int32(c.Rise), int32(c.Fall)
	if rise <= 0 {
		rise = 2
	}
	if fall <= 0 {
		fall = 3
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = c.Interval
		if ts.dialTO > 0 { // 0: the dial timeout is never
			timeout = min(timeout, ts.dialTO)
		}
	}
	t := time.NewTimer(0) // the first check at once
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if b.admin.checksPaused() { // disabled: the health it had stays
			t.Reset(c.Interval)
			continue
		}
		d := net.Dialer{Timeout: timeout, KeepAlive: -1}
		conn, err := d.DialContext(ctx, b.network, b.address)
		select {
		case <-ctx.Done():
			if conn != nil {
				conn.Close()
			}
			return
		default:
		}
		if err == nil {
			if h := ts.checkHeader(); h != nil {
				conn.SetWriteDeadline(time.Now().Add(timeout))
				conn.Write(h)
			}
			conn.Close()
			b.fall.Store(0)
			if b.downUntil.Load() != 0 && b.rise.Add(1) >= rise {
				b.rise.Store(0)
				b.failStreak.Store(0)
				b.downUntil.Store(0)
				b.logState(b.rt.srv.log, false, "health check passed", nil)
			}
		} else {
			b.rise.Store(0)
			if b.downUntil.Load() == 0 && b.fall.Add(1) >= fall {
				b.fall.Store(0)
				b.downUntil.Store(noRetry)
				b.logState(b.rt.srv.log, true, "health check failed", err)
			} else if b.downUntil.Load() != 0 && b.downUntil.Load() != noRetry {
				// Down by a dial's backoff: the checks decide now.
				b.downUntil.Store(noRetry)
			}
		}
		t.Reset(c.Interval)
	}
}

// checkHeader is what a check writes before it closes, on a route that
// sends the PROXY protocol: a target that requires the header would
// otherwise log each check as a broken connection. It is a connection of
// the relay's own (v2 LOCAL; v1 UNKNOWN), as HAProxy's checks of a
// send-proxy server say; nil without SendProxy.
func (ts *targetSet) checkHeader() []byte {
	switch ts.proxy {
	case 1:
		return []byte("PROXY UNKNOWN\r\n")
	case 2:
		return proxyproto.AppendV2Local(nil)
	}
	return nil
}
