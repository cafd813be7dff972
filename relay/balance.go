package relay

import (
	"math"
	"net/netip"
)

// The balancing policies. Each returns the index of the target a new
// client gets, or -1 when none is eligible; none allocates.

// smoothSequence returns one period of nginx's smooth weighted
// round-robin over weights (ngx_http_upstream_get_peer): each turn every
// target's current weight grows by its weight, the largest wins and
// loses the total. The period is the sum of the weights divided by their
// greatest common divisor; a cursor over it is then lock-free.
func smoothSequence(weights []int) []uint16 {
	g := 0
	for _, w := range weights {
		g = gcd(g, w)
	}
	if g == 0 {
		return nil
	}
	total := 0
	for _, w := range weights {
		total += w / g
	}
	cur := make([]int, len(weights))
	seq := make([]uint16, 0, total)
	for range total {
		best := -1
		for i, w := range weights {
			cur[i] += w / g
			if w > 0 && (best < 0 || cur[i] > cur[best]) {
				best = i
			}
		}
		cur[best] -= total
		seq = append(seq, uint16(best))
	}
	return seq
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// pickRoundRobin takes the next turn of the sequence. A turn whose target
// is not eligible is passed over for the turn after it, so that a down
// target's turns go to the others in proportion to their weights, as if
// it were out of the rotation (nginx and HAProxy skip a down server the
// same way); handing them all to the target listed after it would give
// that one the down target's whole share on top of its own.
func (ts *targetSet) pickRoundRobin(tried *triedSet, anyState bool, now *int64) int {
	seq := ts.order()
	m := uint64(len(seq))
	if m == 0 {
		return -1
	}
	if i := int(seq[(ts.next.Add(1)-1)%m]); ts.eligible(i, tried, anyState, now) {
		return i
	}
	// Pass turns over only if some target can take one: each target with
	// a positive weight has a turn in every period of the sequence.
	some := false
	for i := range ts.bs {
		some = some || ts.eligible(i, tried, anyState, now)
	}
	if !some {
		return -1
	}
	for range m - 1 {
		if i := int(seq[(ts.next.Add(1)-1)%m]); ts.eligible(i, tried, anyState, now) {
			return i
		}
	}
	// Concurrent picks took every turn of the eligible ones meanwhile.
	for i := range ts.bs {
		if ts.eligible(i, tried, anyState, now) {
			return i
		}
	}
	return -1
}

// pickLeastConn takes the eligible target with the fewest active
// connections per unit of weight, starting the scan at a rotating place
// so that ties go round. A dial in progress counts as a connection, as
// HAProxy counts a server's from the moment it is chosen: else a target
// slow to answer would look empty, and take every new client until its
// dials complete.
func (ts *targetSet) pickLeastConn(tried *triedSet, anyState bool, now *int64) int {
	n := len(ts.bs)
	start := int(ts.next.Add(1) % uint64(n))
	best := -1
	var bestActive int64
	for k := range n {
		i := (start + k) % n
		if !ts.eligible(i, tried, anyState, now) {
			continue
		}
		a := ts.bs[i].active.Load() + ts.bs[i].dialing.Load()
		// a/w < bestActive/bestW, without division.
		if best < 0 || a*int64(ts.weight(best)) < bestActive*int64(ts.weight(i)) {
			best, bestActive = i, a
		}
	}
	return best
}

// pickHash is weighted rendezvous hashing: target i scores a client
// weight_i / -ln(u), u uniform in (0,1) from a hash of the client address
// and the target's key, and the highest score wins (Schindelhauer and
// Schomaker's weighted distributed hash tables). Each target's share of
// clients is its weight's share, and taking a target out moves only the
// clients it had.
func (ts *targetSet) pickHash(client netip.Addr, tried *triedSet, anyState bool, now *int64) int {
	a16 := client.As16()
	var hi, lo uint64
	for j := range 8 {
		hi = hi<<8 | uint64(a16[j])
		lo = lo<<8 | uint64(a16[8+j])
	}
	ch := mix64(hi ^ mix64(lo))
	best := -1
	var bestScore float64
	for i, b := range ts.bs {
		if !ts.eligible(i, tried, anyState, now) {
			continue
		}
		h := mix64(ch ^ b.key)
		u := (float64(h>>11) + 0.5) / (1 << 53) // in (0, 1)
		score := float64(ts.weight(i)) / -math.Log(u)
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// mix64 is the finalizer of SplitMix64: a bijection whose every output
// bit depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
