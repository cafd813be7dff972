package relay

import (
	"testing"

	"github.com/zeroio/zeroio/internal/evloop"
)

// pastNextTick waits until every event loop of s has fired its timers
// up to a tick after now: a timer whose expiry wrongly fell in the past,
// or within that tick, has fired by then. The goroutine engine's timers
// are the runtime's deadlines, which need no wait.
func pastNextTick(t *testing.T, s *Server) {
	t.Helper()
	e, ok := s.eng.(*eventEngine)
	if !ok {
		return
	}
	until := mono() + 2*evloop.Tick
	waitFor(t, func() bool {
		for _, lp := range e.started() {
			var now int64
			lp.call(func() { now = lp.now }) // a turn: timers due by now have fired
			if now < until {
				return false
			}
		}
		return true
	})
}
