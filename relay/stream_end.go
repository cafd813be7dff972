package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// The end of a relayed stream, on every engine: why it ended, its route's
// and its target's counters, and its line in the connection log.

var errIdle = errors.New("relay: idle timeout")

// errQuiet ends a connection whose end the caller counted already.
var errQuiet = errors.New("relay: closed, counted")

// endReason maps the error that ended the relay (nil: both sides
// closed; errQuiet: counted already) to the reason logged, counting idle
// timeouts and copy errors on the route.
func (st *stream) endReason(why error) endReason {
	rt, end := st.rt, st.endFirst
	switch why {
	case nil, errQuiet:
	case errShutdown:
		end = endShutdown
	case errAdminClose:
		end = endClosed
	case errIdle:
		rt.st.idleTimeouts.Add(1)
		end = endIdle
		st.debug("idle timeout")
	case errMaxDuration:
		rt.st.maxDurations.Add(1)
		end = endMaxDuration
		st.debug("max duration")
	default:
		rt.st.errCopy.Add(1)
		end = endReset
		if rt.srv.log.Enabled(context.Background(), slog.LevelDebug) {
			rt.srv.log.Debug("relay ended with error", "route", rt.name, "client", st.src.Addr(), "err", why)
		}
	}
	if st.endWhy != 0 {
		end = st.endWhy
	}
	return end
}

// end counts how the stream ended (why, as endReason takes it) and logs
// its line, at now (mono): a relay counts on its route and its target; a
// client turned away before its dial (denied, over a limit, a bad
// header) is counted where it was turned away and logs no line, unless
// it ended for a reason of its own (endWhy: no target answered, a reset
// before the dial). It does not give back the slots (release).
func (st *stream) end(why error, now int64) {
	rt := st.rt
	if rt == nil { // turned away before a route took it
		return
	}
	st.stopPacing()
	end := st.endReason(why)
	switch {
	case st.relaying:
		rt.st.relayed.Add(1)
		st.b.connEnd(st.upN, st.downN)
	case st.endWhy != 0:
		st.b = nil
	default:
		return
	}
	if rt.srv.connLogOn() {
		rt.logEnd(st.src, st.b, st.upN, st.downN, now-st.start, end)
	}
}

// noTarget records that no target answered the dial: the stream ends
// with no target, counted as a dial error.
func (st *stream) noTarget() {
	st.rt.st.errDial.Add(1)
	st.endWhy = endNoTarget
}

// idleLeft is how long a relay whose bytes last moved at last (mono) may
// stay idle from now under idle: 0 or less once it is over.
func idleLeft(idle time.Duration, last, now int64) int64 {
	return last + int64(idle) - now
}
