package relay

import (
	"math/rand/v2"
	"testing"
)

// TestWheel arms, re-arms and disarms timers at random and checks each
// fires once, within one tick after its time, and never early.
func TestWheel(t *testing.T) {
	var w wheel
	now := int64(12345) * wheelTick
	w.init(now)
	cs := make([]*evConn, 300)
	for i := range cs {
		cs[i] = &evConn{idx: int32(i)}
	}
	want := map[*evConn]int64{}
	rng := rand.New(rand.NewPCG(1, 2))
	fired := 0
	for step := range 20000 {
		c := cs[rng.IntN(len(cs))]
		switch rng.IntN(3) {
		case 0, 1:
			at := now + rng.Int64N(int64(wheelSlots)*wheelTick*3)
			w.arm(c, at, now)
			want[c] = at
		case 2:
			w.disarm(c)
			delete(want, c)
		}
		if w.n != len(want) {
			t.Fatalf("step %d: %d armed, want %d", step, w.n, len(want))
		}
		now += rng.Int64N(3 * wheelTick)
		w.advance(now, func(c *evConn) {
			at, ok := want[c]
			if !ok {
				t.Fatalf("step %d: timer %d fired, not armed", step, c.idx)
			}
			if at > now || now-at > 4*wheelTick {
				t.Fatalf("step %d: timer for %d fired at %d", step, at, now)
			}
			delete(want, c)
			fired++
		})
	}
	for c, at := range want {
		if at < now-wheelTick {
			t.Errorf("timer %d for %d never fired (now %d)", c.idx, at, now)
		}
	}
	if fired == 0 {
		t.Fatal("nothing fired")
	}
}

// TestWheelFarTimersSleep: timers due far beyond a turn of the wheel
// (idle timeouts of connections that came one after another) do not wake
// the loop on every tick while none is due: an idle loop sleeps.
func TestWheelFarTimersSleep(t *testing.T) {
	var w wheel
	now := int64(12345) * wheelTick
	w.init(now)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		c := &evConn{idx: int32(i)}
		// An hour from now, one every few milliseconds.
		w.arm(c, now+int64(i)*3e6+3600e9, now)
		now += rng.Int64N(2 * wheelTick)
	}
	// Sleep as the loop does for a minute, none due.
	wakes := 0
	for end := now + 60e9; now < end; {
		ms := w.timeout(now)
		if ms < 0 {
			t.Fatal("no timer armed")
		}
		now += int64(ms)*1e6 + 1 // a wake-up lands past the millisecond
		wakes++
		w.advance(now, func(c *evConn) { t.Fatalf("timer %d fired an hour early", c.idx) })
	}
	// A wake-up per tick would be 6000; one per turn (5.12 s) is what
	// far timers should cost.
	if wakes > 30 {
		t.Errorf("%d wake-ups in a minute with nothing due", wakes)
	}
}
