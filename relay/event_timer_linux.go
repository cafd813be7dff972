package relay

import (
	"unsafe"

	"github.com/zeroio/zeroio/internal/evloop"
)

// wheel is a loop's timer wheel (package evloop's), timing connections:
// each evConn has one timer, c.tm. Arming it again replaces the time it
// was armed for; when it fires, the loop calls c.expired (expire).
type wheel struct{ evloop.Wheel }

// arm sets c's timer to fire at at; now is the loop's time.
func (w *wheel) arm(c *evConn, at, now int64) { w.Arm(&c.tm, at, now) }

// disarm cancels c's timer, if armed.
func (w *wheel) disarm(c *evConn) { w.Disarm(&c.tm) }

// expire runs when the timer t of a connection of l fires.
func (l *loop) expire(t *evloop.Timer) { connOf(t).expired() }

// connOf returns the evConn whose timer t is: the wheel holds only the
// tm fields of the loop's evConns, so stepping back from t by that
// field's offset stays within the evConn it was allocated in (rule 3 of
// unsafe.Pointer).
func connOf(t *evloop.Timer) *evConn {
	return (*evConn)(unsafe.Add(unsafe.Pointer(t), -int(unsafe.Offsetof(evConn{}.tm))))
}
