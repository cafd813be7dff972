package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
	"github.com/zeroio/zeroio/cmd/zeroio/internal/report"
)

const benchUsage = `Usage: zeroio bench [flags]

Runs zeroio against its peers on loopback, interleaved in one process
(every peer and zeroio once per round, for --count rounds, the order of
each configuration's impls rotated every round) so that a noisy machine's
drift hits all of them alike, and reports medians, ratios and whether
each ratio is beyond the noise (p-values of benchstat's test).
With no flags it runs the configurations that show each comparison, in a
few minutes on 2 cores; --full runs every size, batch and chunk.

Suites:
  pool    byte-buffer pools: zeroio Sized, Slab, Arena against make,
          sync.Pool, mcache, bytebufferpool, go-buffer-pool, bufpool
  udp     batched datagram I/O against net, x/net, wireguard-go and a
          minimal C sender and receiver (the floor: GSO and GRO, built
          with cc; c-mmsg: plain sendmmsg/recvmmsg); bulk MB/s and CPU
          per GiB
  splice  stream copies for every socket pair against io.CopyN and a
          reused 64 KiB buffer
  relay   zeroio relay against a Go io.Copy relay, and HAProxy and socat
          when they are on PATH
  relay-udp
          the zeroio UDP relay against a naive Go relay, socat, nginx
          stream (with libnginx-mod-stream) and a minimal C UDP relay
          (the floor, built with cc): ping-pong p50 and p99; datagrams
          per second, relay CPU per datagram and memory per session from
          100 and 1,000 clients (1 to 1,000 and 1400-byte datagrams
          with --full)
  relay-http
          the zeroio relay command between wrk and nginx (keep-alive and
          Connection: close 1 KiB GETs, 1 MiB GETs) against HAProxy, the
          Go io.Copy relay and a minimal C epoll relay (the floor, built
          with cc); req/s, p99 latency, relay CPU per request
  relay-tls
          TLS connection churn through the zeroio relay command, a plain
          route and routes chosen by SNI, against HAProxy (req.ssl_sni);
          relay CPU per connection
  relay-quic
          quic-go through the zeroio relay command and nginx stream
          (with libnginx-mod-stream), each balancing over two quic-go
          servers: handshakes per second, the share of connections
          routed by SNI to the server they named, bulk MB/s, relay CPU
          per GiB, and the share that survive a NAT rebinding
  quic    quic-go bulk transfer over *net.UDPConn, over a *udp.Conn
          handed to it as it is, and over a *udp.Conn through quicudp
          (zeroio's batch reader with GRO); MB/s and CPU per GiB

Writes to --out (default ./bench-out):
  table.txt    the terminal table: medians, zeroio's ratio to the best
               peer, and that ratio's p-value (~: within the noise)
  bench.txt    raw results in Go benchmark format (benchstat reads it)
  results.json every sample, median, ratio and p-value
  report.html  a self-contained report with charts

Flags:
`

// benchOptions are the flags of zeroio bench.
type benchOptions struct {
	suites    []string
	count     int
	quick     bool
	full      bool
	out       string
	json      bool
	benchtime time.Duration
}

func parseBenchFlags(args []string, stdout io.Writer) (benchOptions, error) {
	o := benchOptions{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	// The caller prints parse errors on one line; --help goes to stdout,
	// as zeroio relay --help does.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	suites := fs.String("suite", strings.Join(bench.Groups, ","), "comma-separated suites to run: "+strings.Join(bench.Groups, ", "))
	fs.IntVar(&o.count, "count", 6, "rounds: samples per benchmark (medians need at least 6)")
	fs.BoolVar(&o.quick, "quick", false, "smoke run under a minute: fewer cases, 2 rounds, short runs (for CI)")
	fs.BoolVar(&o.full, "full", false, "every configuration the go test suites have (every size, batch and chunk): about 13 minutes on 2 cores")
	fs.StringVar(&o.out, "out", "bench-out", "directory for table.txt, bench.txt, results.json and report.html")
	fs.BoolVar(&o.json, "json", false, "print results.json to stdout instead of the table")
	fs.DurationVar(&o.benchtime, "benchtime", 0, "target time per sample (default 60ms; 10ms with --quick, 100ms with --full)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return o, err
		}
		return o, fmt.Errorf("%v (see zeroio bench --help)", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.benchtime < 0 {
		return o, fmt.Errorf("--benchtime must be positive, got %v", o.benchtime)
	}
	for _, s := range strings.Split(*suites, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, g := range bench.Groups {
			known = known || g == s
		}
		if !known {
			return o, fmt.Errorf("unknown suite %q (choose from %s)", s, strings.Join(bench.Groups, ", "))
		}
		o.suites = append(o.suites, s)
	}
	if len(o.suites) == 0 {
		return o, errors.New("no suite selected")
	}
	if o.quick && o.full {
		return o, errors.New("--quick and --full exclude each other")
	}
	if o.quick {
		if !flagSet(fs, "count") {
			o.count = 2
		}
		if o.benchtime == 0 {
			o.benchtime = 10 * time.Millisecond
		}
	}
	if o.benchtime == 0 {
		o.benchtime = 60 * time.Millisecond
		if o.full {
			o.benchtime = 100 * time.Millisecond
		}
	}
	if o.count < 1 {
		return o, fmt.Errorf("--count must be at least 1, got %d", o.count)
	}
	return o, nil
}

func (o benchOptions) scale() bench.Scale {
	switch {
	case o.quick:
		return bench.Quick
	case o.full:
		return bench.Full
	}
	return bench.Default
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func runBench(args []string, stdout, stderr io.Writer) int {
	o, err := parseBenchFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "zeroio bench: %v\n", err)
		return 2
	}
	// Find out now, not after minutes of measuring, that the report
	// cannot be written.
	if err := report.CheckDir(o.out); err != nil {
		fmt.Fprintf(stderr, "zeroio bench: --out %s: %v\n", o.out, err)
		return 2
	}
	// The relay-http and relay-tls suites run this executable's own
	// `zeroio relay`. A test binary has no such command: its tests set
	// bench.ZeroioCommand to a zeroio they built.
	if bench.ZeroioCommand == "" && !testing.Testing() {
		if exe, err := os.Executable(); err == nil {
			bench.ZeroioCommand = exe
		}
	}
	defer stopOnInterrupt(stderr, os.Exit)()
	rep, err := runSuites(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "zeroio bench: %v\n", err)
		return 1
	}
	if err := rep.Write(o.out); err != nil {
		// The results still reach stdout.
		fmt.Fprintf(stderr, "zeroio bench: %v\n", err)
		rep.WriteTable(stdout)
		return 1
	}
	if o.json {
		if err := rep.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "zeroio bench: %v\n", err)
			return 1
		}
	} else {
		rep.WriteTable(stdout)
		fmt.Fprintf(stdout, "\nWrote %s: table.txt, bench.txt (benchstat), results.json, report.html\n", o.out)
	}
	if n := rep.Failures(); n > 0 {
		fmt.Fprintf(stderr, "zeroio bench: %d benchmarks failed; see the report\n", n)
		return 1
	}
	return 0
}

// stopOnInterrupt makes SIGINT and SIGTERM stop the peers the suites
// started and exit with 130: nginx, HAProxy, socat and the zeroio relays
// run in process groups of their own, so a terminal's ^C does not reach
// them, and they would go on listening after zeroio bench died. The
// returned func stops watching.
func stopOnInterrupt(stderr io.Writer, exit func(int)) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			bench.StopAll()
			fmt.Fprintf(stderr, "\nzeroio bench: interrupted (%v): stopped the peers; no report written\n", sig)
			exit(130)
		case <-done:
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// runSuites runs the selected suites' cases, round-robin across rounds.
func runSuites(o benchOptions, stderr io.Writer) (*report.Report, error) {
	testing.Init()
	if err := flag.Set("test.benchtime", o.benchtime.String()); err != nil {
		return nil, err
	}
	rep := report.New(o.count, o.quick, o.full)
	var all []runCase
	for _, s := range bench.Suites() {
		if !contains(o.suites, s.Group) {
			continue
		}
		sr := &report.Suite{Group: s.Group, Name: s.Name, Metric: s.Metric, Also: s.AlsoChart, Paired: s.Paired}
		if sr.Metric == "" {
			sr.Metric = "ns/op"
		}
		rep.Suites = append(rep.Suites, sr)
		if s.Available != nil {
			if why := s.Available(); why != "" {
				sr.Skipped = why
				continue
			}
		}
		if s.Notes != nil {
			sr.Notes = s.Notes()
		}
		for _, c := range s.Cases(o.scale()) {
			cr := &report.Case{Suite: s.Name, Group: s.Group, Name: c.Name, Impl: bench.Impl(c.Name), Config: bench.Config(c.Name)}
			sr.Cases = append(sr.Cases, cr)
			all = append(all, runCase{cr, c.F})
		}
	}
	if len(all) == 0 {
		// Every suite skipped (no nginx or wrk for relay-http): the
		// report still needs its end time and each suite's direction.
		rep.Finished = time.Now()
		rep.Summarize()
		return rep, nil
	}
	groups := groupByConfig(all)
	bar := newProgress(stderr, o.count*len(all))
	for round := range o.count {
		for _, g := range groups {
			// The impls of one configuration run back to back, starting
			// one further each round, so that none always runs first or
			// last after another (a socket, page cache or CPU state left
			// behind would otherwise favour one impl every round).
			for k := range g {
				c := g[(k+round)%len(g)]
				bar.describe(fmt.Sprintf("round %d/%d: %s", round+1, o.count, c.Suite), c.Name)
				c.run()
				bar.add()
			}
		}
	}
	bar.finish()
	rep.Finished = time.Now()
	rep.Summarize()
	return rep, nil
}

// groupByConfig groups the cases of each suite and configuration, in
// the order they first appear, each group holding the impls of one
// configuration.
func groupByConfig(all []runCase) [][]runCase {
	type key struct{ suite, config string }
	index := map[key]int{}
	var groups [][]runCase
	for _, c := range all {
		k := key{c.Suite, c.Config}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// runCase is a case of the report and the benchmark that samples it.
type runCase struct {
	*report.Case
	f func(*testing.B)
}

// run takes one sample of the case.
func (c runCase) run() {
	var why string
	skipped := false
	r := testing.Benchmark(func(b *testing.B) {
		defer func() {
			// testing.Benchmark discards what b logs; the cases keep
			// the message of their own checks for us.
			switch {
			case b.Failed():
				why = bench.Reason(b)
				if why == "" {
					why = "failed"
				}
			case b.Skipped():
				skipped, why = true, bench.Reason(b)
			}
		}()
		c.f(b)
	})
	if r.N == 0 {
		switch {
		case skipped:
			c.Skipped = why
			if why == "" {
				c.Skipped = "skipped"
			}
		case why == "":
			c.Failed = "no iterations ran"
		default:
			c.Failed = why
		}
		return
	}
	s := report.Sample{
		N:           r.N,
		NsPerOp:     float64(r.T.Nanoseconds()) / float64(r.N),
		BytesPerOp:  float64(r.MemBytes) / float64(r.N),
		AllocsPerOp: float64(r.MemAllocs) / float64(r.N),
		Extra:       map[string]float64{},
	}
	if r.Bytes > 0 && r.T > 0 {
		s.MBPerSec = float64(r.Bytes) * float64(r.N) / 1e6 / r.T.Seconds()
	}
	for k, v := range r.Extra {
		s.Extra[k] = v
	}
	c.Samples = append(c.Samples, s)
}

// progress is a progress bar on a terminal, and a line per suite
// elsewhere (CI logs).
type progress struct {
	bar  *progressbar.ProgressBar
	w    io.Writer
	last string
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetWidth(30),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionShowElapsedTimeOnFinish(),
				progressbar.OptionFullWidth(),
				progressbar.OptionClearOnFinish(),
			)
		}
	}
	return p
}

// describe names the running case: on a terminal in the bar, elsewhere a
// line each time the round or suite changes.
func (p *progress) describe(stage, name string) {
	if p.bar != nil {
		p.bar.Describe(stage + "/" + name)
		return
	}
	if stage != p.last {
		p.last = stage
		fmt.Fprintf(p.w, "zeroio bench: %s\n", stage)
	}
}

func (p *progress) add() {
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
