package relay

import (
	"math"
	"time"
)

// A hashed timer wheel (Varghese and Lauck, "Hashed and Hierarchical
// Timing Wheels"): each connection has at most one timer, linked into
// the slot of its expiry tick, so arming and disarming are O(1) and
// allocate nothing; a timer further out than one turn of the wheel stays
// in its slot for the turns in between. Such a timer (an idle timeout)
// is linked into the slot of its tick rounded down to wheelCoarse ticks
// instead, and moved to its own tick's slot in its last turn: far timers
// then wake the loop once a turn, not on every tick of it, however many
// connections armed them at different times. Times are the loop's
// monotonic nanoseconds.
const (
	wheelSlots  = 512                   // a power of two
	wheelTick   = int64(10 * 1_000_000) // 10 ms: the resolution of timeouts
	wheelCoarse = wheelSlots            // far timers share one slot
)

// after returns the loop time d after now, or the farthest time there is
// when that would overflow: a timeout of centuries (a duration just short
// of Never) never fires, rather than wrapping around to the past and
// firing at once.
func after(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

type wheel struct {
	slots [wheelSlots]*evConn // heads of doubly linked lists
	cur   int64               // the last tick processed
	n     int                 // timers armed
}

// timer is the part of a connection the wheel links.
type timer struct {
	next, prev *evConn
	at         int64 // expiry; 0 when not armed
	slot       int32
}

func (w *wheel) init(now int64) { w.cur = now/wheelTick - 1 }

// arm sets c's timer to fire at at, replacing any armed before; now is
// the loop's time.
func (w *wheel) arm(c *evConn, at, now int64) {
	w.disarm(c)
	if w.n == 0 {
		w.cur = now/wheelTick - 1 // nothing to fire in the ticks slept through
	}
	t := at / wheelTick
	if t <= w.cur {
		t = w.cur + 1
	} else if t-w.cur > wheelSlots {
		t -= t % wheelCoarse // still after cur
	}
	w.link(c, at, t)
}

// link links c, due at at, into the slot of tick t.
func (w *wheel) link(c *evConn, at, t int64) {
	slot := int32(t & (wheelSlots - 1))
	s := &w.slots[slot]
	c.tm.at, c.tm.slot, c.tm.prev, c.tm.next = at, slot, nil, *s
	if *s != nil {
		(*s).tm.prev = c
	}
	*s = c
	w.n++
}

// disarm cancels c's timer, if armed.
func (w *wheel) disarm(c *evConn) {
	if c.tm.at == 0 {
		return
	}
	if c.tm.prev != nil {
		c.tm.prev.tm.next = c.tm.next
	} else {
		w.slots[c.tm.slot] = c.tm.next
	}
	if c.tm.next != nil {
		c.tm.next.tm.prev = c.tm.prev
	}
	c.tm = timer{}
	w.n--
}

// advance fires, through fire, every timer due by now. fire may arm and
// disarm timers, including the one firing. A tick is processed once it
// has passed whole, so every timer in its slot that is due in this turn
// of the wheel is due by now: timers fire late by less than a tick, never
// early, and none is left behind for a turn.
func (w *wheel) advance(now int64, fire func(*evConn)) {
	end := now/wheelTick - 1
	for w.cur < end {
		w.cur++
		if w.n == 0 {
			w.cur = end
			return
		}
		c := w.slots[w.cur&(wheelSlots-1)]
		for c != nil {
			next := c.tm.next
			if at := c.tm.at; at <= now {
				w.disarm(c)
				fire(c)
			} else if t := at / wheelTick; t-w.cur <= wheelSlots && int32(t&(wheelSlots-1)) != c.tm.slot {
				// A far timer's last turn: to its own tick's slot.
				w.disarm(c)
				w.link(c, at, t)
			}
			c = next
		}
	}
}

// timeout returns how long epoll_wait may sleep, in milliseconds, before
// the next tick that may hold a due timer has passed: -1 (forever) when
// none is armed.
func (w *wheel) timeout(now int64) int {
	if w.n == 0 {
		return -1
	}
	t := w.cur + 1 // the next tick to process; skip empty slots
	for i := 0; i < wheelSlots && w.slots[t&(wheelSlots-1)] == nil; i++ {
		t++
	}
	next := (t + 1) * wheelTick
	ms := int((next - now + 999_999) / 1_000_000)
	return max(ms, 0)
}
