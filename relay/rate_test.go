package relay

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

func TestParseConnRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ConnRate
		err  bool
	}{
		{"10/s", ConnRate{10, time.Second}, false},
		{"600/m", ConnRate{600, time.Minute}, false},
		{"5000/h", ConnRate{5000, time.Hour}, false},
		{"none", ConnRate{}, false},
		{"0/s", ConnRate{}, true},
		{"-1/s", ConnRate{}, true},
		{"+3/s", ConnRate{}, true},
		{"10", ConnRate{}, true},
		{"10/", ConnRate{}, true},
		{"10/d", ConnRate{}, true},
		{"1.5/s", ConnRate{}, true},
		{"/s", ConnRate{}, true},
		{"", ConnRate{}, true},
		{"10/sec", ConnRate{}, true},
	} {
		got, err := ParseConnRate(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseConnRate(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
		if err == nil && c.want.N != 0 {
			if back, _ := ParseConnRate(got.String()); back != got {
				t.Errorf("%q: String %q does not parse back", c.in, got)
			}
		}
	}
}

func TestParseByteRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ByteRate
		err  string
	}{
		{"2MiB/s", 2 << 20, ""},
		{"500KB/s", 500_000, ""},
		{"1.5GB/s", 1_500_000_000, ""},
		{"1GiB/s", 1 << 30, ""},
		{"100B/s", 100, ""},
		{"0.5KiB/s", 512, ""},
		{"none", 0, ""},
		{"2MiB", 0, "want a positive number"},
		{"2mib/s", 0, "want a positive number"},
		{"2 MiB/s", 0, "want a positive number"},
		{"MiB/s", 0, "want a positive number"},
		{"-2MiB/s", 0, "want a positive number"},
		{"1e3KB/s", 0, "want a positive number"},
		{"1..2KB/s", 0, "want a positive number"},
		{"0B/s", 0, "less than 1 B/s"},
		{"0.1B/s", 0, "less than 1 B/s"},
		{"65GiB/s", 0, "more than the most"},
		{"2MiB/m", 0, "want a positive number"},
	} {
		got, err := ParseByteRate(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParseByteRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseByteRate(%q) error %v; want one saying %q", c.in, err, c.err)
		}
		if err == nil && got != 0 {
			if back, _ := ParseByteRate(got.String()); back != got {
				t.Errorf("%q: String %q does not parse back", c.in, got)
			}
		}
	}
}

// FuzzParseByteRate: any text parses to a rate in range or an error,
// never a panic, and a rate's String parses back to it.
func FuzzParseByteRate(f *testing.F) {
	for _, s := range []string{"2MiB/s", "500KB/s", "1.5GB/s", "none", "/s", ".KB/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseByteRate(s)
		if err != nil {
			return
		}
		if r < 0 || r > maxByteRate {
			t.Fatalf("%q: rate %d out of range", s, r)
		}
		if r != 0 {
			if back, err := ParseByteRate(r.String()); err != nil || back != r {
				t.Fatalf("%q: %v does not parse back: %v, %v", s, r, back, err)
			}
		}
	})
}

// The connection bucket lets one period's worth through at once, then
// one per period/N.
func TestGCRAConnRate(t *testing.T) {
	var tat int64
	now := int64(1e12)
	cost, burst := int64(100e6), int64(1e9) // 10/s
	n := 0
	for range 40 {
		if gcraTake(&tat, now, cost, burst) {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("a burst let %d of 40 through; want 10", n)
	}
	if gcraTake(&tat, now+99e6, cost, burst) {
		t.Fatal("a connection passed before a period/N refilled one")
	}
	if !gcraTake(&tat, now+100e6, cost, burst) {
		t.Fatal("no connection passed once period/N refilled one")
	}
}

// A byte bucket lets its window's worth through, then, once spent, says
// when its quantum is back.
func TestByteRoom(t *testing.T) {
	const rate = ByteRate(2 << 20)
	now := int64(1e12)
	room, at := byteRoom(0, rate, now)
	if want := int64(rate) / 10; room != want || at != 0 {
		t.Fatalf("full bucket: room %d, at %d; want %d, 0", room, at, want)
	}
	tat := now + byteCost(int(room), rate)
	room, at = byteRoom(tat, rate, now)
	if room > 0 || at <= now {
		t.Fatalf("spent bucket: room %d, at %d", room, at)
	}
	if r, _ := byteRoom(tat, rate, at); r < paceQuantum {
		t.Fatalf("at its time, the bucket holds %d bytes; want a quantum, %d", r, paceQuantum)
	}
	if r, a := byteRoom(tat+10*paceWindow, rate, now); r != 0 || a <= now {
		t.Fatalf("a bucket deep in debt: room %d, at %d", r, a)
	}
}

// A flood of distinct addresses does not grow the table or push out a
// client whose connections pin its slot, and finding a client allocates
// nothing.
func TestClientTableBounded(t *testing.T) {
	var l load
	ct := l.clientTable()
	now := int64(1e12)
	victim := netip.MustParseAddr("192.0.2.1")
	s := ct.pin(victim, now)
	rate := ConnRate{N: 1, Per: time.Hour}
	for i := range 200_000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		ct.takeConn(ip, rate, now+int64(i))
	}
	if !s.used || s.ip != victim.As16() || s.pins != 1 {
		t.Fatal("a pinned client's slot was given to another")
	}
	ct.unpin(s)
	if ct.takeConn(victim, rate, now) != true || ct.takeConn(victim, rate, now) != false {
		t.Fatal("the client's connection bucket is not its own")
	}
	if percpu.RaceEnabled {
		return
	}
	ip := netip.MustParseAddr("2001:db8::1")
	if n := testing.AllocsPerRun(1000, func() {
		ct.takeConn(ip, ConnRate{N: 10, Per: time.Second}, mono())
		ct.unpin(ct.pin(ip, mono()))
	}); n != 0 {
		t.Fatalf("%v allocations per client look-up; want 0", n)
	}
}

// When every slot of a set is pinned, a new client shares one: it is
// limited with another, never not at all.
func TestClientTableShares(t *testing.T) {
	var l load
	ct := l.clientTable()
	now := int64(1e12)
	k := netip.MustParseAddr("192.0.2.1").As16()
	set := ct.set(k)
	set.mu.Unlock()
	pinned := 0
	for i := 0; pinned < clientWays+1 && i < 1<<22; i++ {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		s := ct.set(ip.As16())
		s.mu.Unlock()
		if s == set {
			if c := ct.pin(ip, now); c == nil {
				t.Fatal("no slot")
			}
			pinned++
		}
	}
	if pinned != clientWays+1 {
		t.Fatalf("found %d addresses of one set", pinned)
	}
	total := int32(0)
	for i := range set.slots {
		total += set.slots[i].pins
	}
	if total != clientWays+1 {
		t.Fatalf("pins %d; want %d", total, clientWays+1)
	}
}
