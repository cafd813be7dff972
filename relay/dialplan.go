package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/zeroio/zeroio/internal/evloop"
)

// errNoTarget is a dial's error when the route has no target left to try.
var errNoTarget = errors.New("relay: no target left to try")

// dialPlan is one client's way through its route's targets, the same on
// every engine: which target to dial next (the target set's balancing,
// preferring targets that are up), how long each attempt may take, and
// what an attempt's outcome tells of its target's health. It knows
// nothing of sockets or bytes: an engine dials what next gives, within
// the time it gives, and reports the outcome (connected, failed,
// abandon). Times are mono nanoseconds.
//
// Each attempt may take the time left divided by the number of targets
// left to try, so that a target that never answers cannot use up the
// time another would have answered in; with one target it gets the
// whole DialTimeout. A DialTimeout of 0 ([Never]) bounds nothing.
type dialPlan struct {
	rt       *route // for the log
	ts       *targetSet
	client   netip.Addr // for client-hash balancing
	tried    triedSet
	left     int      // targets that may still be tried
	deadline int64    // when the whole dial must be done; 0: no bound
	b        *backend // the target of the attempt under way, if any
	fdWait   int64    // the last wait for a descriptor (waitFD)
}

// start plans a dial of rt's current targets for client under r's
// DialTimeout, from now.
func (p *dialPlan) start(rt *route, r *Route, client netip.Addr, now int64) {
	*p = dialPlan{rt: rt, ts: rt.targets(), client: client}
	p.left = p.ts.tries()
	if r.DialTimeout > 0 {
		p.deadline = evloop.After(now, r.DialTimeout)
	}
}

// next starts an attempt at the next target: it returns the target and
// when the attempt must end (0: no bound), or nil when no target is left
// to try or no time.
func (p *dialPlan) next(now int64) (*backend, int64) {
	if p.left <= 0 || p.deadline != 0 && p.deadline <= now {
		return nil, 0
	}
	b := p.ts.pick(p.client, &p.tried)
	if b == nil {
		return nil, 0
	}
	p.left--
	end := p.share(now)
	p.b = b
	b.dialing.Add(1) // until connected, failed or abandon
	return b, end
}

// share is when a part of the attempt under way that starts now must
// end: the attempt's part of the time left, as next gives it (0: no
// bound). A target's other addresses, and a retry after waiting for a
// descriptor, take their part from it.
func (p *dialPlan) share(now int64) int64 {
	if p.deadline == 0 {
		return 0
	}
	return now + (p.deadline-now)/int64(p.left+1)
}

// timeLeft reports whether the dial has time left at now.
func (p *dialPlan) timeLeft(now int64) bool { return p.deadline == 0 || p.deadline > now }

// connected ends the attempt under way: its target answered, and takes
// the client (stream.relayTo). It returns the target.
func (p *dialPlan) connected() *backend {
	b := p.b
	p.b = nil
	b.dialing.Add(-1)
	b.dialOK()
	return b
}

// failed ends the attempt under way, the target's fault (err: refused,
// timed out, or errLoop): it is marked down.
func (p *dialPlan) failed(err error) {
	b := p.b
	p.b = nil
	b.dialing.Add(-1)
	if err == errLoop {
		b.loops.Store(true)
	}
	b.dialFailed(err)
	if log := p.rt.srv.log; log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("dial failed; trying another target", "route", p.rt.name, "target", b.name, "err", err)
	}
}

// abandon ends the attempt under way, if any, as no fault of its target:
// the dial was cut short (Close, Shutdown's deadline, the client gone) or
// the process ran out of descriptors.
func (p *dialPlan) abandon() {
	if p.b != nil {
		p.b.dialing.Add(-1)
		p.b = nil
	}
}

// Out of descriptors or memory, which is no fault of the target, a dial
// waits for them and tries again, rather than mark the target down or
// drop the client: 5 ms doubling to 100 ms, as long as the dial's time
// allows.
const (
	fdWaitMin = int64(5 * time.Millisecond)
	fdWaitMax = int64(100 * time.Millisecond)
)

// waitFD returns how long to wait before dialling again after the
// process ran out of descriptors, or false when the dial has no time
// left for it.
func (p *dialPlan) waitFD(now int64) (int64, bool) {
	p.fdWait = min(max(2*p.fdWait, fdWaitMin), fdWaitMax)
	if p.deadline != 0 && now+p.fdWait > p.deadline {
		return 0, false
	}
	return p.fdWait, true
}

// lookupTimeout bounds a lookup of a target's name started at now for
// this dial: the whole dial's time left, or none.
func (p *dialPlan) lookupTimeout(now int64) time.Duration {
	if p.deadline == 0 {
		return 0
	}
	return time.Duration(max(p.deadline-now, 1))
}
