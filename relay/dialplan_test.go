package relay

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// planRoute is a route of n targets of weight 1 under dialTimeout (0:
// Never, as normalize leaves it), with no listener or socket.
func planRoute(n int, dialTimeout time.Duration) *route {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	r := Route{Name: "t", Listen: Addr{"tcp", "127.0.0.1:1"}, DialTimeout: dialTimeout}
	for i := range n {
		r.Targets = append(r.Targets, Target{Addr: Addr{"tcp", fmt.Sprintf("10.0.0.%d:80", i+1)}, Weight: 1})
	}
	return newRoute(s, r, nil)
}

func TestDialPlanFailover(t *testing.T) {
	rt := planRoute(3, 3*time.Second)
	var p dialPlan
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	seen := map[*backend]bool{}
	for i := range 3 {
		b, _ := p.next(int64(i))
		if b == nil || seen[b] {
			t.Fatalf("attempt %d: target %v, seen before: %v", i, b, seen[b])
		}
		seen[b] = true
		if b.dialing.Load() != 1 {
			t.Errorf("attempt %d: dialing %d, want 1", i, b.dialing.Load())
		}
		p.failed(syscall.ECONNREFUSED)
		if now := int64(0); !b.isDown(&now) || b.dialing.Load() != 0 {
			t.Errorf("attempt %d: a failed target is not down, or still dialing (%d)", i, b.dialing.Load())
		}
	}
	if b, _ := p.next(3); b != nil {
		t.Errorf("a fourth attempt at %s: every target was tried", b.addr)
	}
}

func TestDialPlanTimeSplit(t *testing.T) {
	s := int64(time.Second)
	for _, tc := range []struct {
		name    string
		targets int
		timeout time.Duration
		at      []int64 // when each attempt starts (the previous one failed)
		ends    []int64 // when each must end; 0: no bound
	}{
		{"one target takes it all", 1, 3 * time.Second, []int64{0}, []int64{3 * s}},
		{"three share equally", 3, 3 * time.Second, []int64{0, s, 2 * s}, []int64{s, 2 * s, 3 * s}},
		{"a quick failure leaves its time to the others", 3, 3 * time.Second, []int64{0, 0, 0}, []int64{s, 3 * s / 2, 3 * s}},
		{"never bounds nothing", 3, 0, []int64{0, 100 * s, 1 << 62}, []int64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := planRoute(tc.targets, tc.timeout)
			var p dialPlan
			p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
			for i, now := range tc.at {
				b, end := p.next(now)
				if b == nil {
					t.Fatalf("attempt %d at %v: no target", i, time.Duration(now))
				}
				if end != tc.ends[i] {
					t.Errorf("attempt %d at %v: ends at %v, want %v", i, time.Duration(now), time.Duration(end), time.Duration(tc.ends[i]))
				}
				p.failed(errors.New("refused"))
			}
		})
	}
}

func TestDialPlanOutOfTime(t *testing.T) {
	rt := planRoute(3, time.Second)
	var p dialPlan
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	if b, _ := p.next(int64(time.Second)); b != nil {
		t.Errorf("an attempt at %s with no time left", b.addr)
	}
	if p.timeLeft(int64(time.Second)) {
		t.Error("time left at the deadline")
	}
}

func TestDialPlanAllDown(t *testing.T) {
	rt := planRoute(2, time.Second)
	for _, b := range rt.targets().bs {
		b.dialFailed(errors.New("refused"))
	}
	var p dialPlan
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	// Every target is down: each is still tried, as a last resort.
	for i := range 2 {
		if b, _ := p.next(0); b == nil {
			t.Fatalf("attempt %d: no target while every target is down", i)
		}
		p.failed(errors.New("refused"))
	}
	// A target that reached the relay itself is no last resort.
	rt = planRoute(1, time.Second)
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	p.next(0)
	p.failed(errLoop)
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	if b, _ := p.next(0); b != nil {
		t.Errorf("dialled %s again, which reached the relay itself", b.addr)
	}
}

func TestDialPlanAbandon(t *testing.T) {
	rt := planRoute(1, time.Second)
	var p dialPlan
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	b, _ := p.next(0)
	p.abandon()
	p.abandon() // nothing under way: no-op
	if now := int64(0); b.isDown(&now) || b.dialing.Load() != 0 || b.dialFails.Load() != 0 {
		t.Error("an abandoned dial counted against its target")
	}
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	b, _ = p.next(0)
	if p.connected() != b || b.dialing.Load() != 0 {
		t.Error("connected did not end the attempt at its target")
	}
}

func TestDialPlanWaitFD(t *testing.T) {
	ms := int64(time.Millisecond)
	var p dialPlan
	rt := planRoute(1, 200*time.Millisecond)
	p.start(rt, rt.cfg.Load(), netip.Addr{}, 0)
	var got []int64
	now := int64(0)
	for {
		w, ok := p.waitFD(now)
		if !ok {
			break
		}
		got = append(got, w/ms)
		now += w
	}
	want := fmt.Sprint([]int64{5, 10, 20, 40, 80})
	if fmt.Sprint(got) != want {
		t.Errorf("waits %v ms, want %s ms within 200 ms", got, want)
	}
	p.start(planRoute(1, 0), &Route{}, netip.Addr{}, 0) // Never: waits go on
	for range 20 {
		if w, ok := p.waitFD(1 << 62); !ok || w > 100*ms {
			t.Fatalf("wait %v, %v under Never", time.Duration(w), ok)
		}
	}
	if p.lookupTimeout(1<<62) != 0 {
		t.Error("a name lookup is bounded under Never")
	}
}

// TestDialTimeoutNeverHostName relays to a target named by a host name
// with no dial timeout, on every engine: the event engine's lookup once
// took Never's 0 for a timeout already expired.
func TestDialTimeoutNeverHostName(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		b := startBackend(t, "tcp4", echo)
		_, port, _ := net.SplitHostPort(b.addr.Address)
		s := startRelay(t, route0("127.0.0.1:0", Addr{"tcp", "localhost:" + port}, func(r *Route) { r.DialTimeout = Never }))
		c := dialRoute(t, s, "r")
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
			t.Fatalf("read %q, %v; want the echo", got, err)
		}
	})
}
