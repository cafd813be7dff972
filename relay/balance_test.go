package relay

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

// testSet builds a target set of weights over tcp://10.0.0.i:80.
func testSet(t testing.TB, policy Balance, weights ...int) *targetSet {
	t.Helper()
	r := Route{Name: "t", Listen: Addr{"tcp", "127.0.0.1:1"}, Balance: policy}
	for i, w := range weights {
		r.Targets = append(r.Targets, Target{Addr: Addr{"tcp", fmt.Sprintf("10.0.0.%d:80", i+1)}, Weight: w})
	}
	return newTargetSet(&route{name: "t", srv: &Server{}}, &r, nil, nil, nil)
}

func indexOf(ts *targetSet, b *backend) int { return slices.Index(ts.bs, b) }

func TestSmoothSequence(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    string
	}{
		{[]int{1}, "0"},
		{[]int{1, 1, 1}, "012"},
		{[]int{5, 1, 1}, "0010200"}, // nginx's example: a a b a c a a
		{[]int{2, 4}, "101"},        // reduced by the common divisor
		{[]int{0, 3}, "1"},
		{[]int{0, 0}, ""},
	} {
		var b strings.Builder
		for _, i := range smoothSequence(tc.weights) {
			fmt.Fprint(&b, i)
		}
		if b.String() != tc.want {
			t.Errorf("weights %v: %q, want %q", tc.weights, b.String(), tc.want)
		}
	}
}

func TestPickRoundRobinShares(t *testing.T) {
	ts := testSet(t, RoundRobin, 3, 1, 0)
	count := make([]int, 3)
	for range 400 {
		var tried triedSet
		count[indexOf(ts, ts.pick(netip.Addr{}, &tried))]++
	}
	if count[0] != 300 || count[1] != 100 || count[2] != 0 {
		t.Fatalf("shares %v, want [300 100 0]", count)
	}
}

func TestPickSkipsTriedAndDown(t *testing.T) {
	for _, policy := range []Balance{RoundRobin, LeastConn, ClientHash} {
		t.Run(string(policy), func(t *testing.T) {
			ts := testSet(t, policy, 1, 1, 1)
			ts.bs[1].downUntil.Store(noRetry)
			client := netip.MustParseAddr("192.0.2.7")
			for range 50 {
				var tried triedSet
				var got []int
				for b := ts.pick(client, &tried); b != nil; b = ts.pick(client, &tried) {
					got = append(got, indexOf(ts, b))
				}
				// Both live targets first, the down one last, each once.
				if len(got) != 3 || got[2] != 1 || got[0] == got[1] {
					t.Fatalf("order %v: want the two live targets, then the down one", got)
				}
			}
		})
	}
}

func TestPickLeastConn(t *testing.T) {
	ts := testSet(t, LeastConn, 1, 2, 1)
	ts.bs[0].active.Store(3)
	ts.bs[1].active.Store(5) // 2.5 per unit of weight
	ts.bs[2].active.Store(2)
	var tried triedSet
	if i := indexOf(ts, ts.pick(netip.Addr{}, &tried)); i != 2 {
		t.Fatalf("picked %d, want 2 (fewest per weight)", i)
	}
	ts.bs[2].active.Store(4)
	tried = triedSet{}
	if i := indexOf(ts, ts.pick(netip.Addr{}, &tried)); i != 1 {
		t.Fatalf("picked %d, want 1 (2.5 per weight)", i)
	}
}

// TestClientHashMovesOneInN checks rendezvous hashing's property: taking
// one target of n out moves exactly the clients it had (about 1/n), and
// adding one moves only the clients it now wins (about 1/(n+1)).
func TestClientHashMovesOneInN(t *testing.T) {
	const n, clients = 5, 20000
	all := testSet(t, ClientHash, 1, 1, 1, 1, 1)
	addr := func(c int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(c >> 16), byte(c >> 8), byte(c)}) }
	pick := func(ts *targetSet, c int) Addr {
		var tried triedSet
		return ts.pick(addr(c), &tried).addr
	}
	before := make([]Addr, clients)
	share := map[Addr]int{}
	for c := range clients {
		before[c] = pick(all, c)
		share[before[c]]++
	}
	for a, k := range share {
		if k < clients/n*8/10 || k > clients/n*12/10 {
			t.Errorf("target %s has %d of %d clients; want about %d", a, k, clients, clients/n)
		}
	}
	// Remove the last target: a set of the first four, same backends.
	r := Route{Balance: ClientHash}
	for _, b := range all.bs[:n-1] {
		r.Targets = append(r.Targets, Target{Addr: b.addr, Weight: 1})
	}
	fewer := newTargetSet(&route{srv: &Server{}}, &r, all, nil, nil)
	removed := all.bs[n-1].addr
	moved := 0
	for c := range clients {
		after := pick(fewer, c)
		if before[c] != removed && after != before[c] {
			t.Fatalf("client %d moved from %s to %s though its target stayed", c, before[c], after)
		}
		if after != before[c] {
			moved++
		}
	}
	if moved != share[removed] {
		t.Fatalf("%d clients moved, want the removed target's %d", moved, share[removed])
	}
	// Adding it back moves the same clients back, and no other.
	for c := range clients {
		if got := pick(all, c); got != before[c] {
			t.Fatalf("client %d: %s, want %s", c, got, before[c])
		}
	}
	// A down target's clients move, the others stay.
	all.bs[0].downUntil.Store(noRetry)
	for c := range clients {
		if got := pick(all, c); before[c] != all.bs[0].addr && got != before[c] {
			t.Fatalf("client %d moved from %s to %s while another target was down", c, before[c], got)
		}
	}
}

func TestClientHashWeights(t *testing.T) {
	ts := testSet(t, ClientHash, 3, 1)
	count := make([]int, 2)
	for c := range 20000 {
		var tried triedSet
		count[indexOf(ts, ts.pick(netip.AddrFrom4([4]byte{172, 16, byte(c >> 8), byte(c)}), &tried))]++
	}
	if count[0] < 14000 || count[0] > 16000 {
		t.Fatalf("shares %v: want about 15000 and 5000", count)
	}
}

func TestPickAllocs(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, policy := range []Balance{RoundRobin, LeastConn, ClientHash} {
		for _, prio := range [][]uint16{nil, {0, 1, 1}} { // SRV priorities
			ts := testSet(t, policy, 1, 2, 3)
			ts.prio = prio
			ts.bs[0].downUntil.Store(noRetry)
			client := netip.MustParseAddr("2001:db8::1")
			if n := testing.AllocsPerRun(100, func() {
				var tried triedSet
				for ts.pick(client, &tried) != nil {
				}
			}); n != 0 {
				t.Errorf("%s, priorities %v: %v allocations per pick", policy, prio, n)
			}
		}
	}
}

func TestPickConcurrent(t *testing.T) {
	ts := testSet(t, RoundRobin, 1, 1, 1, 1)
	var wg sync.WaitGroup
	counts := make([][4]int, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				var tried triedSet
				counts[g][indexOf(ts, ts.pick(netip.Addr{}, &tried))]++
			}
		}()
	}
	wg.Wait()
	var total [4]int
	for _, c := range counts {
		for i := range c {
			total[i] += c[i]
		}
	}
	if total != [4]int{2000, 2000, 2000, 2000} {
		t.Fatalf("shares %v, want 2000 each: the cursor is shared", total)
	}
}

func BenchmarkPick(b *testing.B) {
	for _, policy := range []Balance{RoundRobin, LeastConn, ClientHash} {
		for _, n := range []int{1, 4, 16} {
			// priorities=2: the later half of the targets of a second
			// SRV priority, taken only when the first is down.
			for _, np := range []int{1, 2} {
				b.Run(fmt.Sprintf("policy=%s/targets=%d/priorities=%d", policy, n, np), func(b *testing.B) {
					ws := make([]int, n)
					for i := range ws {
						ws[i] = 1
					}
					ts := testSet(b, policy, ws...)
					if np > 1 {
						ts.prio = make([]uint16, n)
						for i := n / 2; i < n; i++ {
							ts.prio[i] = 1
						}
					}
					client := netip.MustParseAddr("192.0.2.1")
					b.ReportAllocs()
					for b.Loop() {
						var tried triedSet
						ts.pick(client, &tried)
					}
				})
			}
		}
	}
}

// TestPickRoundRobinDownShares: while a target is down, its turns go to the
// others in proportion to their weights, as if it had weight 0 (nginx and
// HAProxy leave a down server out of the rotation); not all to the target
// listed after it, which would take twice its share.
func TestPickRoundRobinDownShares(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		down    int
		want    []int // shares of 600 clients
	}{
		{[]int{1, 1, 1}, 1, []int{300, 0, 300}},
		{[]int{1, 1, 1}, 0, []int{0, 300, 300}},
		{[]int{1, 2, 1, 2}, 1, []int{150, 0, 150, 300}},
		{[]int{5, 1, 1}, 0, []int{0, 300, 300}},
	} {
		ts := testSet(t, RoundRobin, tc.weights...)
		ts.bs[tc.down].downUntil.Store(noRetry)
		count := make([]int, len(tc.weights))
		for range 600 {
			var tried triedSet
			count[indexOf(ts, ts.pick(netip.Addr{}, &tried))]++
		}
		if !slices.Equal(count, tc.want) {
			t.Errorf("weights %v, target %d down: shares %v, want %v", tc.weights, tc.down, count, tc.want)
		}
	}
}

// TestClientHashSameAcrossProcesses: client-hash gives a client the same
// target in every process, so that a restarted relay, or two relays
// behind one load balancer, keep each client on its target. The test
// binary runs itself and compares the child's picks with its own.
func TestClientHashSameAcrossProcesses(t *testing.T) {
	picks := func() string {
		ts := testSet(t, ClientHash, 1, 1, 1, 1)
		var b strings.Builder
		for i := range 64 {
			var tried triedSet
			fmt.Fprint(&b, indexOf(ts, ts.pick(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), &tried)))
		}
		return b.String()
	}
	if os.Getenv("ZEROIO_HASH_CHILD") == "1" {
		fmt.Print("picks=" + picks() + "\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClientHashSameAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ZEROIO_HASH_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, child, ok := strings.Cut(string(out), "picks=")
	if !ok {
		t.Fatalf("child printed no picks:\n%s", out)
	}
	child, _, _ = strings.Cut(child, "\n")
	if mine := picks(); child != mine {
		t.Fatalf("client-hash picks differ between processes:\n%s\n%s", mine, child)
	}
}
