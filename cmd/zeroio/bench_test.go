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
	"github.com/zeroio/zeroio/cmd/zeroio/internal/report"
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
	var rep report.Report
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
				if want := report.FormatValue(v); !strings.Contains(line, want) {
					t.Errorf("table row %q lacks %s median %s", rw.Config, impl, want)
				}
			}
			if rw.Ratio != 0 && !strings.Contains(line, report.FormatRatio(rw.Ratio)) {
				t.Errorf("table row %q lacks ratio %s", rw.Config, report.FormatRatio(rw.Ratio))
			}
			if rw.Ratio != 0 && (rw.P <= 0 || rw.P > 1 || !strings.Contains(line, report.FormatP(rw))) {
				t.Errorf("table row %q: p = %v, want it in (0, 1] and %q in %q", rw.Config, rw.P, report.FormatP(rw), line)
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
	s := runCase{&report.Case{Name: "impl=y"}, func(b *testing.B) { b.Skip("socat not on PATH") }}
	s.run()
	f := runCase{&report.Case{Name: "impl=x"}, func(b *testing.B) { b.FailNow() }}
	f.run()
	rep := &report.Report{Suites: []*report.Suite{{Name: "X", Cases: []*report.Case{s.Case, f.Case}}}}
	if s.Failed != "" || s.Skipped == "" || f.Failed == "" || rep.Failures() != 1 {
		t.Errorf("skipped case: Failed %q, Skipped %q; failed case: Failed %q; failures %d, want 1", s.Failed, s.Skipped, f.Failed, rep.Failures())
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
	var rep report.Report
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
