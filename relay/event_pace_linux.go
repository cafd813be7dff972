package relay

import (
	"math"

	"github.com/zeroio/zeroio/internal/evloop"
	"golang.org/x/sys/unix"
)

// The event engine's side of the limits of a relaying connection
// (stream.pace): one timer, c.tm, serves the idle timeout, MaxDuration
// and the waits of paced directions, armed for the earliest. A paced
// direction reads only what its rates let through (flow.most) and, once
// they are spent, stops until its timer; it waits empty, holding
// neither buffer nor pipe, and its wait is not idleness.

// armRelay arms c's timer for the earliest of its idle timeout (unless
// a direction waits for its rate), its MaxDuration and the end of a
// paced direction's wait.
func (c *evConn) armRelay() {
	l, p := c.lp, &c.pace
	at := int64(math.MaxInt64)
	if idle := c.cfg.IdleTimeout; idle > 0 && p.wait == [2]int64{} {
		at = evloop.After(c.last, idle)
	}
	for _, t := range [...]int64{p.end, p.wait[dirUp], p.wait[dirDown]} {
		if t != 0 {
			at = min(at, t)
		}
	}
	if at == math.MaxInt64 {
		l.wheel.disarm(c)
		return
	}
	l.wheel.arm(c, at, l.now)
}

// relayTimer runs when a relaying connection's timer fires: it ends the
// connection at its MaxDuration, or idle, or moves the bytes of the
// paced directions whose wait is over.
func (c *evConn) relayTimer() {
	l, p := c.lp, &c.pace
	if p.end != 0 && l.now >= p.end {
		c.finish(errMaxDuration)
		return
	}
	resumed := false
	for d, t := range p.wait {
		if t != 0 && l.now >= t {
			c.resumePacing(d, l.now)
			resumed = true
		}
	}
	if resumed {
		c.last = l.now
		if c.pumpAll(); c.state != stRelay {
			return // finished
		}
	} else if idle := c.cfg.IdleTimeout; idle > 0 && p.wait == [2]int64{} && idleLeft(idle, c.last, l.now) <= 0 {
		c.finish(errIdle)
		return
	}
	c.armRelay()
}

// pacedIn is the fill step of a paced direction (see pump): it reads
// what the direction's rates let through now, charged to them, or, when
// they let nothing through, starts the direction's wait. Before: the dir
// is empty.
func (c *evConn) pacedIn(f *flow) (more bool, _ unix.Errno) {
	d, l := f.d, c.lp
	if c.pace.wait[f.dir] != 0 {
		return false, 0 // its timer resumes it
	}
	most := bufSize
	if d.spliced {
		most = pipeSize
	}
	f.most = c.paceRoom(f.dir, most, l.now)
	if f.most == 0 {
		c.armRelay()
		return false, 0
	}
	var e unix.Errno
	if d.spliced {
		more, e = c.pipeIn(f)
	} else {
		more, e = c.bufIn(f)
	}
	c.paced(f.dir, d.inPipe+d.end-d.off, l.now)
	return more, e
}
