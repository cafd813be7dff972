package relay

import (
	"errors"
	"io"
	"math"
	"time"

	"github.com/zeroio/zeroio/splice"
)

// errPaceStopped ends a paced copy whose pair was aborted while it
// waited.
var errPaceStopped = errors.New("relay: aborted while paced")

// pacedCopy is copyStream for direction d of a pair with a rate: each
// copy moves what the rates let through now (package splice's Limit,
// still spliced where copyStream splices), and between them the
// direction's goroutine sleeps until the rates let more through. A copy
// that reached its limit holds no pipe or buffer (package splice gives
// them back as it returns), so a waiting direction holds none either,
// and its wait costs the goroutine it already has and a timer. It
// returns nil at src's EOF.
func (p *pair) pacedCopy(dst io.Writer, src io.Reader, d int, progress func(int64)) error {
	var t *time.Timer
	for {
		now := mono()
		n := p.paceRoom(d, maxPacedCopy, now)
		if n == 0 {
			if !p.paceWait(&t, time.Duration(p.pace.wait[d]-now)) {
				return errPaceStopped
			}
			now = mono()
			p.resumePacing(d, now)
			continue
		}
		c := splice.Copier{Progress: progress, Limit: int64(n), Relay: true}
		w, err := c.Copy(dst, src)
		p.paced(d, int(w), mono())
		if err != nil || w < int64(n) {
			if t != nil {
				t.Stop()
			}
			return err
		}
	}
}

// maxPacedCopy is the most one copy of pacedCopy moves: no more than the
// bucket lets through, which holds paceWindow's worth.
const maxPacedCopy = math.MaxInt32

// paceWait sleeps for wait on *t (made on first use), unless abort
// stops the pair first (false). The pair is not idle meanwhile.
func (p *pair) paceWait(t **time.Timer, wait time.Duration) bool {
	p.waiting.Add(1)
	defer func() {
		p.last.Store(mono())
		p.waiting.Add(-1)
	}()
	if *t == nil {
		*t = time.NewTimer(wait)
	} else {
		(*t).Reset(wait)
	}
	select {
	case <-(*t).C:
		return true
	case <-p.stop:
		(*t).Stop()
		return false
	}
}
