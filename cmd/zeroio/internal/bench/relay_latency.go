package bench

import (
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// relayLatencyCases: 64-byte request and response over one TCP connection
// through each stream relay to an echo server, the traffic of a database or
// cache client behind an L4 proxy; p50 and p99 of the round trip are
// reported, and ns/op is their mean.
//
// The relays are measured together, not one after another: one
// measurement starts every relay, opens a connection through each, and
// takes round trips through them in turn, the order rotated every pass, so
// that each relay's round trips come from the same seconds of the
// machine's life and a relay never answers two requests back to back (it
// has gone idle for the other relays' round trips in between, as a relay
// serving one client's occasional requests does). Each case reports its
// relay's share of the next measurement, and the first case of a round to
// find nothing left starts the next measurement: `zeroio bench` runs every
// impl once a round, so each round is one measurement. As in the UDP
// ping-pong, client, echo server and relays run on one CPU (see
// pinProcess), and scheduled as real-time threads where the process may
// (see raisePriority).
func relayLatencyCases(Scale) []Case {
	impls := slices.Clone(relayImpls)
	if cfloorWhyNot() == "" {
		impls = append(impls, "c-floor")
	}
	impls = slices.DeleteFunc(impls, func(impl string) bool { return !havePeer(impl) })
	pp := &tcpPingPong{impls: impls, size: 64, pending: map[string][]pingShare{}}
	var cs []Case
	for _, impl := range impls {
		cs = append(cs, Case{fmt.Sprintf("mode=tcp-pingpong/size=%d/impl=%s", pp.size, impl), func(b *testing.B) {
			pp.report(b, impl)
		}})
	}
	return cs
}

// tcpPingPong holds the measurements taken and not yet reported.
type tcpPingPong struct {
	impls   []string
	size    int
	mu      sync.Mutex
	pending map[string][]pingShare // per impl, oldest first
}

// pingShare is one relay's part of one measurement.
type pingShare struct {
	lat []time.Duration // sorted
	err error
}

// relayLatencyNotes says which peers the suite found and whether it could
// raise the ping-pong's priority.
func relayLatencyNotes() []string {
	notes := peerNotes("haproxy", "socat")()
	if why := cfloorWhyNot(); why != "" {
		notes = append(notes, "skipped c-floor: "+why)
	}
	if err := canRaisePriority(); err != nil {
		notes = append(notes, fmt.Sprintf("ran at the normal priority (%v): the p99 includes other programs' time slices", err))
	} else {
		notes = append(notes, "client, echo server and relays pinned to one CPU, SCHED_FIFO")
	}
	return notes
}

// pingPongBenchtimes is how long a measurement runs, in benchtimes
// per relay measured: enough round trips that the p99 of each holds a
// hundred or more of them in the default run.
const pingPongBenchtimes = 5

// report reports impl's share of the oldest pending measurement, taking a
// new one first if there is none.
func (pp *tcpPingPong) report(b *testing.B, impl string) {
	s := pp.next(b, impl)
	if s.err != nil {
		fatal(b, s.err)
	}
	if len(s.lat) == 0 {
		fatalf(b, "%s: no round trip measured", impl)
	}
	// The harness calls a case again until one call has taken benchtime,
	// and a second call would report the next measurement's share: wait
	// the benchtime out in b.Loop, which the harness does not repeat.
	for b.Loop() {
		time.Sleep(time.Millisecond)
	}
	var sum time.Duration
	for _, d := range s.lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(s.lat)), "ns/op")
	b.ReportMetric(float64(s.lat[len(s.lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(s.lat[len(s.lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// next takes impl's share of the oldest pending measurement, measuring
// first if there is none.
func (pp *tcpPingPong) next(b *testing.B, impl string) pingShare {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if len(pp.pending[impl]) == 0 {
		shares := pp.measure(b)
		for i, impl := range pp.impls {
			pp.pending[impl] = append(pp.pending[impl], shares[i])
		}
	}
	s := pp.pending[impl][0]
	pp.pending[impl] = pp.pending[impl][1:]
	return s
}

// measure starts every relay in front of one echo server and takes round
// trips through each in turn until the measurement's time is up. A relay
// that fails to start or to answer gets its error instead of latencies.
func (pp *tcpPingPong) measure(b *testing.B) []pingShare {
	defer pinProcess(0)()
	restore, _ := raisePriority() // relayLatencyNotes says if it could not
	defer restore()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fatal(b, err)
	}
	defer ln.Close()
	go serveConns(ln, func(c net.Conn) { io.Copy(c, c) })
	shares := make([]pingShare, len(pp.impls))
	conns := make([]net.Conn, len(pp.impls))
	for i, impl := range pp.impls {
		c, p, err := pp.dial(impl, ln.Addr().String())
		defer p.stop()
		if err != nil {
			shares[i].err = fmt.Errorf("%s: %w", impl, err)
			continue
		}
		defer c.Close()
		conns[i] = c
	}
	budget, minPasses := pingPongBudget(len(pp.impls))
	for _, c := range conns {
		if c != nil {
			c.SetDeadline(time.Now().Add(budget + time.Minute))
		}
	}
	msg, buf := make([]byte, pp.size), make([]byte, pp.size)
	ping := func(i int) bool {
		_, err := conns[i].Write(msg)
		if err == nil {
			_, err = io.ReadFull(conns[i], buf)
		}
		if err != nil {
			shares[i].err = fmt.Errorf("%s: %w", pp.impls[i], err)
		}
		if shares[i].err != nil {
			conns[i].Close()
			conns[i] = nil
		}
		return conns[i] != nil
	}
	const warm = 100
	start := time.Now()
	for i := range conns {
		for k := 0; k < warm && conns[i] != nil; k++ {
			ping(i)
		}
	}
	// Room for every round trip at the warm-up's pace and a half again:
	// the latencies are not appended to a growing slice, whose copies
	// would start collections in the middle of the round trips.
	passes := minPasses + int(budget/max(time.Since(start)/warm, time.Microsecond))*3/2
	for i := range shares {
		shares[i].lat = make([]time.Duration, 0, passes)
	}
	start = time.Now()
	for pass := 0; pass < minPasses || time.Since(start) < budget; pass++ {
		for k := range conns {
			i := (k + pass) % len(conns)
			if conns[i] == nil {
				continue
			}
			t0 := time.Now()
			if ping(i) {
				shares[i].lat = append(shares[i].lat, time.Since(t0))
			}
		}
	}
	for i := range shares {
		slices.Sort(shares[i].lat)
	}
	return shares
}

// dial starts impl in front of the echo server at target and connects to
// it; the relay returned (nil for direct) is to be stopped even on error.
func (pp *tcpPingPong) dial(impl, target string) (net.Conn, *relayProc, error) {
	addr := target
	var p *relayProc
	if impl != "direct" {
		var err error
		if p, err = startRelayProc(impl, "tcp://"+target); err != nil {
			return nil, nil, err
		}
		addr = p.addr
	}
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return nil, p, err
	}
	return c, p, nil
}

// pingPongBudget returns how long one measurement of n relays runs and
// the fewest passes it takes: pingPongBenchtimes benchtimes per relay,
// or with a benchtime of Nx (a smoke run), N passes and no time.
func pingPongBudget(n int) (time.Duration, int) {
	bt := "1s"
	if f := flag.Lookup("test.benchtime"); f != nil {
		bt = f.Value.String()
	}
	if c, ok := strings.CutSuffix(bt, "x"); ok {
		if passes, err := strconv.Atoi(c); err == nil {
			return 0, passes
		}
	}
	d, err := time.ParseDuration(bt)
	if err != nil {
		d = time.Second
	}
	return d * time.Duration(pingPongBenchtimes*n), 100
}
