package evloop

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestWheel arms, re-arms and disarms timers at random and checks each
// fires once, within one tick after its time, and never early.
func TestWheel(t *testing.T) {
	var w Wheel
	now := int64(12345) * Tick
	w.Init(now)
	want := map[int]int64{}
	fired, step := 0, 0
	ts := make([]Timer, 300)
	fire := func(tm *Timer) {
		i := index(ts, tm)
		at, ok := want[i]
		if !ok {
			t.Fatalf("step %d: timer %d fired, not armed", step, i)
		}
		if tm.At() != 0 {
			t.Fatalf("step %d: timer %d armed as it fires", step, i)
		}
		if at > now || now-at > 4*Tick {
			t.Fatalf("step %d: timer for %d fired at %d", step, at, now)
		}
		delete(want, i)
		fired++
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for step = range 20000 {
		i := rng.IntN(len(ts))
		switch rng.IntN(3) {
		case 0, 1:
			at := now + rng.Int64N(int64(wheelSlots)*Tick*3)
			w.Arm(&ts[i], at, now)
			want[i] = at
		case 2:
			w.Disarm(&ts[i])
			delete(want, i)
		}
		if w.Len() != len(want) {
			t.Fatalf("step %d: %d armed, want %d", step, w.Len(), len(want))
		}
		now += rng.Int64N(3 * Tick)
		w.Advance(now, fire)
	}
	for i, at := range want {
		if at < now-Tick {
			t.Errorf("timer %d for %d never fired (now %d)", i, at, now)
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
	var w Wheel
	now := int64(12345) * Tick
	w.Init(now)
	rng := rand.New(rand.NewPCG(1, 2))
	ts := make([]Timer, 2000)
	fire := func(tm *Timer) { t.Fatalf("timer %d fired an hour early", index(ts, tm)) }
	for i := range ts {
		// An hour from now, one every few milliseconds.
		w.Arm(&ts[i], now+int64(i)*3e6+3600e9, now)
		now += rng.Int64N(2 * Tick)
	}
	// Sleep as the loop does for a minute, none due.
	wakes := 0
	for end := now + 60e9; now < end; {
		ms := w.Timeout(now)
		if ms < 0 {
			t.Fatal("no timer armed")
		}
		now += int64(ms)*1e6 + 1 // a wake-up lands past the millisecond
		wakes++
		w.Advance(now, fire)
	}
	// A wake-up per tick would be 6000; one per turn (5.12 s) is what
	// far timers should cost.
	if wakes > 30 {
		t.Errorf("%d wake-ups in a minute with nothing due", wakes)
	}
}

// TestWheelFireRearms: fire may arm the timer firing again (a dial split
// in steps, an idle timeout pushed back), and it then fires again at its
// new time; one disarmed before its time never fires.
func TestWheelFireRearms(t *testing.T) {
	var w Wheel
	now := int64(777) * Tick
	w.Init(now)
	var a, b Timer
	fires := 0
	fire := func(tm *Timer) {
		if tm != &a {
			t.Fatal("a disarmed timer fired")
		}
		if fires++; fires < 3 {
			w.Arm(&a, now+5*Tick, now)
		}
	}
	w.Arm(&a, now+Tick, now)
	w.Arm(&b, now+2*Tick, now)
	w.Disarm(&b)
	w.Disarm(&b) // twice is harmless
	for range 100 {
		now += Tick
		w.Advance(now, fire)
	}
	if fires != 3 || w.Len() != 0 || w.Timeout(now) != -1 {
		t.Fatalf("%d fires, %d armed, timeout %d; want 3, 0, -1", fires, w.Len(), w.Timeout(now))
	}
}

// TestAfter: a duration past the end of time gives the farthest time,
// never one in the past.
func TestAfter(t *testing.T) {
	now := int64(1e18)
	if got := After(now, time.Second); got != now+1e9 {
		t.Errorf("After 1s: %d", got)
	}
	if got := After(now, time.Duration(math.MaxInt64-1)); got != math.MaxInt64 {
		t.Errorf("After centuries: %d, want MaxInt64", got)
	}
}

// TestWheelAllocs: arming, disarming and advancing allocate nothing.
func TestWheelAllocs(t *testing.T) {
	var w Wheel
	now := int64(1) * Tick
	w.Init(now)
	ts := make([]Timer, 64)
	fire := func(*Timer) {}
	if a := testing.AllocsPerRun(100, func() {
		for i := range ts {
			w.Arm(&ts[i], now+int64(i)*Tick, now)
		}
		w.Disarm(&ts[0])
		now += 100 * Tick
		w.Advance(now, fire)
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// index returns the index of t in ts.
func index(ts []Timer, t *Timer) int {
	for i := range ts {
		if &ts[i] == t {
			return i
		}
	}
	panic("not a timer of ts")
}
