package evloop

import (
	"math"
	"time"
)

// A hashed timer wheel (Varghese and Lauck, "Hashed and Hierarchical
// Timing Wheels"): each Timer is linked into the slot of its expiry tick,
// so arming and disarming are O(1) and allocate nothing; a timer further
// out than one turn of the wheel stays in its slot for the turns in
// between. Such a timer (an idle timeout) is linked into the slot of its
// tick rounded down to wheelCoarse ticks instead, and moved to its own
// tick's slot in its last turn: far timers then wake the loop once a
// turn, not on every tick of it, however many were armed at different
// times. Times are the loop's monotonic nanoseconds.
const (
	wheelSlots  = 512                   // a power of two
	Tick        = int64(10 * 1_000_000) // 10 ms: the resolution of timers
	wheelCoarse = wheelSlots            // far timers share one slot
)

// After returns the loop time d after now, or the farthest time there is
// when that would overflow: a timeout of centuries never fires, rather
// than wrapping around to the past and firing at once.
func After(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// A Timer is a node of a Wheel, embedded in what it times (intrusive, as
// the kernel's timer_list): the Wheel's fire function finds its owner from
// it. Its zero value is disarmed, so resetting the owner to its zero value
// while the timer is not armed is safe. A Timer belongs to one Wheel at a
// time, and must not move while armed.
type Timer struct {
	next, prev *Timer
	at         int64 // expiry; 0 when not armed
	slot       int32
}

// At returns the time t is due, or 0 when it is not armed.
func (t *Timer) At() int64 { return t.at }

// A Wheel holds the armed timers of one loop. The zero Wheel needs Init.
//
// Invariants: an armed timer (at != 0) is linked into exactly one slot,
// slots[slot]; n counts the armed timers; every armed timer's tick is
// after cur, the last tick processed.
type Wheel struct {
	slots [wheelSlots]*Timer // heads of doubly linked lists
	cur   int64              // the last tick processed
	n     int                // timers armed
}

// Init readies w at the loop time now.
func (w *Wheel) Init(now int64) { w.cur = now/Tick - 1 }

// Len returns how many timers are armed.
func (w *Wheel) Len() int { return w.n }

// Arm sets t to fire at at, replacing any time it was armed for before;
// now is the loop's time. A time not after now fires at the next tick.
func (w *Wheel) Arm(t *Timer, at, now int64) {
	w.Disarm(t)
	if w.n == 0 {
		w.cur = now/Tick - 1 // nothing to fire in the ticks slept through
	}
	tick := at / Tick
	if tick <= w.cur {
		tick = w.cur + 1
	} else if tick-w.cur > wheelSlots {
		tick -= tick % wheelCoarse // still after cur
	}
	w.link(t, at, tick)
}

// link links t, due at at, into the slot of tick.
func (w *Wheel) link(t *Timer, at, tick int64) {
	slot := int32(tick & (wheelSlots - 1))
	s := &w.slots[slot]
	t.at, t.slot, t.prev, t.next = at, slot, nil, *s
	if *s != nil {
		(*s).prev = t
	}
	*s = t
	w.n++
}

// Disarm cancels t, if armed.
func (w *Wheel) Disarm(t *Timer) {
	if t.at == 0 {
		return
	}
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		w.slots[t.slot] = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.next, t.prev, t.at, t.slot = nil, nil, 0, 0
	w.n--
}

// Advance calls fire with every timer due by now, disarmed first. fire
// may arm and disarm timers, including the one firing. A tick is processed
// once it has passed whole, so every timer in its slot that is due in
// this turn of the wheel is due by now: timers fire late by less than a
// tick, never early, and none is left behind for a turn.
func (w *Wheel) Advance(now int64, fire func(*Timer)) {
	end := now/Tick - 1
	for w.cur < end {
		w.cur++
		if w.n == 0 {
			w.cur = end
			return
		}
		t := w.slots[w.cur&(wheelSlots-1)]
		for t != nil {
			next := t.next
			if at := t.at; at <= now {
				w.Disarm(t)
				fire(t)
			} else if tick := at / Tick; tick-w.cur <= wheelSlots && int32(tick&(wheelSlots-1)) != t.slot {
				// A far timer's last turn: to its own tick's slot.
				w.Disarm(t)
				w.link(t, at, tick)
			}
			t = next
		}
	}
}

// Timeout returns how long the loop may sleep, in milliseconds, before
// the next tick that may hold a due timer has passed: -1 (forever) when
// none is armed.
func (w *Wheel) Timeout(now int64) int {
	if w.n == 0 {
		return -1
	}
	tick := w.cur + 1 // the next tick to process; skip empty slots
	for i := 0; i < wheelSlots && w.slots[tick&(wheelSlots-1)] == nil; i++ {
		tick++
	}
	next := (tick + 1) * Tick
	ms := int((next - now + 999_999) / 1_000_000)
	return max(ms, 0)
}
