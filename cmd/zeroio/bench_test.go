package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/perf/benchfmt"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
	"github.com/zeroio/zeroio/internal/percpu"
)

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--suite", "nope"},
		{"--count", "0"},
		{"--suite", ""},
		{"extra"},
		{"--bogus"},
		{"--benchtime", "-1s"},
		{"--out", "/dev/null/x", "--suite", "pool"},
	} {
		var stderr bytes.Buffer
		if code := run(append([]string{"bench"}, args...), &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("bench %v: exit %d, want 2", args, code)
		}
		if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines > 0 {
			t.Errorf("bench %v: want a one-line error, got:\n%s", args, stderr.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"bench", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "--quick") || errOut.Len() != 0 {
		t.Errorf("bench --help: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// TestBenchQuick runs `zeroio bench --quick --out DIR` and checks what it
// wrote: every suite present, every chart series non-empty, the raw file
// readable by benchfmt, and the JSON in agreement with the table.
func TestBenchQuick(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("benchmarks under the race detector measure the detector")
	}
	dir := t.TempDir()
	// The relay-http and relay-tls suites run `zeroio relay`, which this
	// test binary is not.
	bench.ZeroioCommand = binary
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "--quick", "--out", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("zeroio bench --quick: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	// results.json: every suite group present, each suite run or skipped
	// with a reason, every case sampled or skipped with a reason.
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	groups := map[string]bool{}
	for _, s := range rep.Suites {
		groups[s.Group] = true
		if s.Skipped != "" {
			t.Logf("suite %s/%s skipped: %s", s.Group, s.Name, s.Skipped)
			continue
		}
		if len(s.Cases) == 0 || len(s.Rows) == 0 {
			t.Errorf("suite %s/%s has no results", s.Group, s.Name)
		}
		for _, c := range s.Cases {
			if c.Skipped != "" && len(c.Samples) == 0 {
				t.Logf("%s/%s skipped: %s", s.Name, c.Name, c.Skipped)
				continue
			}
			if len(c.Samples) != rep.Count {
				t.Errorf("%s/%s: %d samples, want %d", s.Name, c.Name, len(c.Samples), rep.Count)
			}
		}
	}
	for _, g := range bench.Groups {
		if !groups[g] {
			t.Errorf("suite group %q missing from results.json", g)
		}
	}
	if rep.Machine.CPU == "" || rep.Machine.Go == "" || rep.Machine.Cores == 0 {
		t.Errorf("machine not described: %+v", rep.Machine)
	}

	// table.txt agrees with the JSON: each row's line shows each median.
	table, err := os.ReadFile(filepath.Join(dir, "table.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Suites {
		section := sectionOf(string(table), "Benchmark"+s.Name+" ")
		if section == "" {
			t.Errorf("table.txt has no section for Benchmark%s", s.Name)
			continue
		}
		for _, rw := range s.Rows {
			line := lineWith(section, rw.Config)
			for impl, v := range rw.Medians {
				if want := formatValue(v); !strings.Contains(line, want) {
					t.Errorf("table row %q lacks %s median %s", rw.Config, impl, want)
				}
			}
			if rw.Ratio != 0 && !strings.Contains(line, formatRatio(rw.Ratio)) {
				t.Errorf("table row %q lacks ratio %s", rw.Config, formatRatio(rw.Ratio))
			}
			if rw.Ratio != 0 && (rw.P <= 0 || rw.P > 1 || !strings.Contains(line, formatP(rw))) {
				t.Errorf("table row %q: p = %v, want it in (0, 1] and %q in %q", rw.Config, rw.P, formatP(rw), line)
			}
		}
	}

	// bench.txt parses as Go benchmark results, one per sample.
	f, err := os.Open(filepath.Join(dir, "bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := benchfmt.NewReader(f, "bench.txt")
	n := 0
	for rd.Scan() {
		switch r := rd.Result().(type) {
		case *benchfmt.Result:
			n++
			if _, ok := r.Value("sec/op"); !ok {
				t.Errorf("%s has no sec/op", r.Name)
			}
		case *benchfmt.SyntaxError:
			t.Errorf("bench.txt: %v", r)
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			want += len(c.Samples)
		}
	}
	if n != want || n == 0 {
		t.Errorf("bench.txt has %d results, want %d", n, want)
	}

	// report.html: a chart for every suite that ran, no empty series.
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	fig := regexp.MustCompile(`data-title="([^"]*)" data-series="([^"]*)" data-points="([^"]*)"`)
	charts := fig.FindAllStringSubmatch(string(html), -1)
	for _, m := range charts {
		series := strings.Split(m[2], ",")
		points := strings.Split(m[3], ",")
		if m[2] == "" || len(series) != len(points) {
			t.Errorf("chart %q: series %q, points %q", m[1], m[2], m[3])
			continue
		}
		for i, p := range points {
			if k, err := strconv.Atoi(p); err != nil || k <= 0 {
				t.Errorf("chart %q: series %s is empty", m[1], series[i])
			}
		}
	}
	for _, s := range rep.Suites {
		if s.Skipped == "" && !strings.Contains(string(html), `data-title="Benchmark`+s.Name) {
			t.Errorf("report.html has no chart for Benchmark%s", s.Name)
		}
	}
	for _, want := range []string{rep.Machine.CPU, rep.Machine.Kernel, rep.Machine.Go, "GOMAXPROCS", "<svg"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(string(html), "http://") && strings.Contains(string(html), "<script src") {
		t.Error("report.html loads scripts from the network")
	}
}

// sectionOf returns the part of the table from the heading containing key
// to the next blank line.
func sectionOf(table, key string) string {
	i := strings.Index(table, key)
	if i < 0 {
		return ""
	}
	rest := table[i:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func lineWith(section, config string) string {
	for _, l := range strings.Split(section, "\n") {
		fields := strings.Fields(l)
		if len(fields) > 0 && fields[0] == config {
			return l
		}
		if config == "" && len(fields) > 0 && !strings.Contains(l, "Benchmark") && !strings.HasPrefix(strings.TrimSpace(l), "config") {
			return l
		}
	}
	return ""
}

// A case that skips is reported as skipped, not failed, and one that fails
// keeps its reason.
func TestBenchCaseSkipAndFail(t *testing.T) {
	s := &caseResult{Name: "impl=y", f: func(b *testing.B) { b.Skip("socat not on PATH") }}
	s.run()
	f := &caseResult{Name: "impl=x", f: func(b *testing.B) { b.FailNow() }}
	f.run()
	rep := &report{Suites: []*suiteResult{{Name: "X", Cases: []*caseResult{s, f}}}}
	if s.Failed != "" || s.Skipped == "" || f.Failed == "" || rep.failures() != 1 {
		t.Errorf("skipped case: Failed %q, Skipped %q; failed case: Failed %q; failures %d, want 1", s.Failed, s.Skipped, f.Failed, rep.failures())
	}
}

// TestBenchAlsoRows: the units a suite charts beside its metric get rows
// and ratios of their own, in the table too, and a baseline (c-floor) is
// never the best peer however good its numbers.
func TestBenchAlsoRows(t *testing.T) {
	cs := func(impl string, reqs, cpu float64) *caseResult {
		c := &caseResult{Name: "load=x/impl=" + impl, Impl: impl, Config: "load=x"}
		for i := range 3 {
			x := map[string]float64{"req/s": reqs + float64(i)}
			if cpu > 0 {
				x["cpu-µs/req"] = cpu + float64(i)/10
			}
			c.Samples = append(c.Samples, sample{N: 1, NsPerOp: 1e9, Extra: x})
		}
		return c
	}
	s := &suiteResult{Name: "RelayHTTP", Metric: "req/s", Also: []string{"cpu-µs/req", "p99-µs"}, Cases: []*caseResult{
		cs("direct", 100000, 0), cs("zeroio", 50000, 20), cs("haproxy", 40000, 10), cs("c-floor", 90000, 5),
	}}
	rep := &report{Count: 3, Suites: []*suiteResult{s}}
	rep.summarize()
	if len(s.Rows) != 1 || s.Rows[0].BestPeer != "haproxy" || s.Rows[0].Ratio < 1.2 {
		t.Fatalf("req/s rows %+v: want zeroio against haproxy, 1.25x", s.Rows)
	}
	if len(s.AlsoRows) != 1 {
		t.Fatalf("also rows %+v: want one, cpu-µs/req (no case reports p99-µs)", s.AlsoRows)
	}
	cpu := s.AlsoRows[0]
	if cpu.Unit != "cpu-µs/req" || cpu.Higher || cpu.BestPeer != "haproxy" || cpu.Ratio > 0.6 || cpu.Medians["c-floor"] != 5.1 {
		t.Errorf("cpu row %+v: want lower-is-better, zeroio 0.5x haproxy, c-floor shown", cpu)
	}
	// Against the floor: zeroio's 50000 req/s is 0.55x c-floor's 90000,
	// and its 20 µs per request 0.25x c-floor's 5.
	if f := s.Rows[0].Floor; f < 0.55 || f > 0.56 || s.Rows[0].FloorP <= 0 {
		t.Errorf("req/s floor ratio %v (p %v), want 0.55x and a p-value", f, s.Rows[0].FloorP)
	}
	if f := cpu.Floor; f < 0.25 || f > 0.26 {
		t.Errorf("cpu floor ratio %v, want 0.25x", f)
	}
	var out bytes.Buffer
	rep.writeTable(&out)
	if !strings.Contains(out.String(), "cpu-µs/req (lower is better)") || !strings.Contains(out.String(), formatRatio(cpu.Ratio)) {
		t.Errorf("table lacks the cpu-µs/req rows:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "floor") || !strings.Contains(out.String(), formatRatio(s.Rows[0].Floor)) {
		t.Errorf("table lacks the floor ratio:\n%s", out.String())
	}
}

// ^C during a run must reach the peers in process groups of their own
// (nginx, HAProxy, the zeroio relays), which the terminal's SIGINT does
// not: zeroio bench stops them and exits 130 with one line.
func TestBenchInterruptStopsPeers(t *testing.T) {
	var stderr bytes.Buffer
	code := make(chan int, 1)
	stop := stopOnInterrupt(&stderr, func(c int) { code <- c })
	defer stop()
	self, _ := os.FindProcess(os.Getpid())
	if err := self.Signal(os.Interrupt); err != nil {
		t.Skipf("cannot send SIGINT here: %v", err)
	}
	select {
	case c := <-code:
		if c != 130 || !strings.Contains(stderr.String(), "interrupted") || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
			t.Errorf("exit %d, stderr %q: want 130 and one line", c, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SIGINT did not stop the bench")
	}
}

// A suite run without its peers (relay-tls with no haproxy) has no
// ratios, and "direct" has no relay CPU: the table and the report leave
// those columns out rather than fill them with dashes as if results.
func TestBenchNoPeerNoEmptyColumns(t *testing.T) {
	cs := func(impl string, conns, cpu float64) *caseResult {
		c := &caseResult{Name: "route=plain/impl=" + impl, Impl: impl, Config: "route=plain"}
		for i := range 3 {
			x := map[string]float64{"conn/s": conns + float64(i)}
			if cpu > 0 {
				x["cpu-µs/conn"] = cpu + float64(i)
			}
			c.Samples = append(c.Samples, sample{N: 1, NsPerOp: 1e9, Extra: x})
		}
		return c
	}
	s := &suiteResult{Group: "relay-tls", Name: "RelayTLS", Metric: "cpu-µs/conn", Also: []string{"conn/s"},
		Notes: []string{"skipped haproxy: haproxy not on PATH"},
		Cases: []*caseResult{cs("direct", 1300, 0), cs("zeroio", 1100, 165)}}
	rep := &report{Count: 3, Suites: []*suiteResult{s}}
	rep.summarize()
	var out bytes.Buffer
	rep.writeTable(&out)
	_, body, _ := strings.Cut(out.String(), "BenchmarkRelayTLS")
	tables := strings.Split(body, "conn/s (higher is better)")
	if len(tables) != 2 {
		t.Fatalf("want a cpu-µs/conn and a conn/s table:\n%s", out.String())
	}
	cpu, conns := tables[0], tables[1]
	if strings.Contains(cpu, "direct") || !strings.Contains(cpu, "166") {
		t.Errorf("cpu-µs/conn table shows the direct column it has no value for:\n%s", out.String())
	}
	if !strings.Contains(conns, "direct") {
		t.Errorf("conn/s table lacks direct:\n%s", out.String())
	}
	if strings.Contains(body, "ratio") {
		t.Errorf("ratio columns with no peer to compare with:\n%s", out.String())
	}
	var html bytes.Buffer
	if err := rep.writeHTML(&html); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html.String(), "zeroio vs best peer") {
		t.Errorf("report.html has a ratio column with no peer")
	}
}

// On a machine without nginx and wrk, --suite relay-http skips its only
// suite: the report must still say which way req/s is better and how
// long the run took, not "lower is better" and a negative duration.
func TestBenchAllSkipped(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no nginx, no wrk
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "--quick", "--suite", "relay-http", "--out", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "(req/s, higher is better)\n  skipped: ") {
		t.Errorf("table:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Finished.Before(rep.Started) || len(rep.Suites) != 1 || !rep.Suites[0].Higher {
		t.Errorf("results.json: started %v, finished %v, suites %+v", rep.Started, rep.Finished, rep.Suites)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`\(-[0-9]`).Match(html) {
		t.Errorf("report.html gives a negative duration")
	}
}

// When a peer cannot start (nginx cannot bind), every case of a suite
// fails: the table and report.html say so and show no empty table, and
// report.html does not claim "0 allocs/op" for cases that never ran.
func TestBenchAllFailed(t *testing.T) {
	var cases []*caseResult
	for _, impl := range []string{"direct", "zeroio", "haproxy"} {
		cases = append(cases, &caseResult{Name: "load=x/impl=" + impl, Impl: impl, Config: "load=x",
			Failed: "nginx did not listen on 127.0.0.1:1: bind() failed"})
	}
	s := &suiteResult{Group: "relay-http", Name: "RelayHTTP", Metric: "req/s", Also: []string{"cpu-µs/req"}, Cases: cases}
	rep := &report{Count: 2, Suites: []*suiteResult{s}}
	rep.summarize()
	var out bytes.Buffer
	rep.writeTable(&out)
	if strings.Contains(out.String(), "config") || strings.Count(out.String(), "FAILED") != 3 {
		t.Errorf("table: want no empty table and three FAILED lines:\n%s", out.String())
	}
	var html bytes.Buffer
	if err := rep.writeHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if strings.Contains(h, "<table>") || strings.Count(h, "bind() failed") != 3 || strings.Contains(h, "0 allocs/op") {
		t.Errorf("report.html: want the three failures, no table and no allocation claim:\n%s", h[strings.Index(h, "<section"):])
	}
}
