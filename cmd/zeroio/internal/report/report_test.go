package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestAlsoRows: the units a suite charts beside its metric get rows
// and ratios of their own, in the table too, and a baseline (c-floor) is
// never the best peer however good its numbers.
func TestAlsoRows(t *testing.T) {
	cs := func(impl string, reqs, cpu float64) *Case {
		c := &Case{Name: "load=x/impl=" + impl, Impl: impl, Config: "load=x"}
		for i := range 3 {
			x := map[string]float64{"req/s": reqs + float64(i)}
			if cpu > 0 {
				x["cpu-µs/req"] = cpu + float64(i)/10
			}
			c.Samples = append(c.Samples, Sample{N: 1, NsPerOp: 1e9, Extra: x})
		}
		return c
	}
	s := &Suite{Name: "RelayHTTP", Metric: "req/s", Also: []string{"cpu-µs/req", "p99-µs"}, Cases: []*Case{
		cs("direct", 100000, 0), cs("zeroio", 50000, 20), cs("haproxy", 40000, 10), cs("c-floor", 90000, 5),
	}}
	rep := &Report{Count: 3, Suites: []*Suite{s}}
	rep.Summarize()
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
	rep.WriteTable(&out)
	if !strings.Contains(out.String(), "cpu-µs/req (lower is better)") || !strings.Contains(out.String(), FormatRatio(cpu.Ratio)) {
		t.Errorf("table lacks the cpu-µs/req rows:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "floor") || !strings.Contains(out.String(), FormatRatio(s.Rows[0].Floor)) {
		t.Errorf("table lacks the floor ratio:\n%s", out.String())
	}
}

// A suite run without its peers (relay-tls with no haproxy) has no
// ratios, and "direct" has no relay CPU: the table and the report leave
// those columns out rather than fill them with dashes as if results.
func TestNoPeerNoEmptyColumns(t *testing.T) {
	cs := func(impl string, conns, cpu float64) *Case {
		c := &Case{Name: "route=plain/impl=" + impl, Impl: impl, Config: "route=plain"}
		for i := range 3 {
			x := map[string]float64{"conn/s": conns + float64(i)}
			if cpu > 0 {
				x["cpu-µs/conn"] = cpu + float64(i)
			}
			c.Samples = append(c.Samples, Sample{N: 1, NsPerOp: 1e9, Extra: x})
		}
		return c
	}
	s := &Suite{Group: "relay-tls", Name: "RelayTLS", Metric: "cpu-µs/conn", Also: []string{"conn/s"},
		Notes: []string{"skipped haproxy: haproxy not on PATH"},
		Cases: []*Case{cs("direct", 1300, 0), cs("zeroio", 1100, 165)}}
	rep := &Report{Count: 3, Suites: []*Suite{s}}
	rep.Summarize()
	var out bytes.Buffer
	rep.WriteTable(&out)
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
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html.String(), "zeroio vs best peer") {
		t.Errorf("report.html has a ratio column with no peer")
	}
}

// When a peer cannot start (nginx cannot bind), every case of a suite
// fails: the table and report.html say so and show no empty table, and
// report.html does not claim "0 allocs/op" for cases that never ran.
func TestAllFailed(t *testing.T) {
	var cases []*Case
	for _, impl := range []string{"direct", "zeroio", "haproxy"} {
		cases = append(cases, &Case{Name: "load=x/impl=" + impl, Impl: impl, Config: "load=x",
			Failed: "nginx did not listen on 127.0.0.1:1: bind() failed"})
	}
	s := &Suite{Group: "relay-http", Name: "RelayHTTP", Metric: "req/s", Also: []string{"cpu-µs/req"}, Cases: cases}
	rep := &Report{Count: 2, Suites: []*Suite{s}}
	rep.Summarize()
	var out bytes.Buffer
	rep.WriteTable(&out)
	if strings.Contains(out.String(), "config") || strings.Count(out.String(), "FAILED") != 3 {
		t.Errorf("table: want no empty table and three FAILED lines:\n%s", out.String())
	}
	var html bytes.Buffer
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if strings.Contains(h, "<table>") || strings.Count(h, "bind() failed") != 3 || strings.Contains(h, "0 allocs/op") {
		t.Errorf("report.html: want the three failures, no table and no allocation claim:\n%s", h[strings.Index(h, "<section"):])
	}
}

// TestPairedSuite: in a paired suite each round is one measurement of
// every impl, so two impls are compared round by round. Rounds that run
// 40% apart hide a steady 5% difference from the U test of the two
// samples, not from the paired test; a case missing a round's sample
// falls back to the U test.
func TestPairedSuite(t *testing.T) {
	speed := []float64{1, 1.4, 1, 1.4, 1, 1.4}
	jitter := []float64{1, 1.01, 0.99, 1.005, 0.995, 1}
	cs := func(impl string, p50 float64, rounds int) *Case {
		c := &Case{Name: "mode=x/impl=" + impl, Impl: impl, Config: "mode=x"}
		for i, f := range speed[:rounds] {
			if impl != "zeroio" {
				f *= jitter[i]
			}
			c.Samples = append(c.Samples, Sample{N: 1, Extra: map[string]float64{"p50-µs": p50 * f}})
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		paired  bool
		rounds  int
		wantSig bool
	}{
		{"paired", true, 6, true},
		{"unpaired", false, 6, false},
		{"paired-missing-round", true, 5, false},
	} {
		s := &Suite{Name: "RelayLatency", Metric: "p50-µs", Paired: tc.paired, Cases: []*Case{
			cs("zeroio", 100, 6), cs("haproxy", 105, tc.rounds),
		}}
		rep := &Report{Count: 6, Suites: []*Suite{s}}
		rep.Summarize()
		rw := s.Rows[0]
		if rw.BestPeer != "haproxy" || rw.P <= 0 || (rw.P < 0.05) != tc.wantSig {
			t.Errorf("%s: ratio %v p %v vs %s, want significant %v", tc.name, rw.Ratio, rw.P, rw.BestPeer, tc.wantSig)
		}
	}
}
