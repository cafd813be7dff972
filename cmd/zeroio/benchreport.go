package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
)

// report is everything zeroio bench measured, and what results.json holds.
type report struct {
	Machine  machine        `json:"machine"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Count    int            `json:"count"`
	Quick    bool           `json:"quick"`
	Full     bool           `json:"full"`
	Suites   []*suiteResult `json:"suites"`
}

type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Kernel     string `json:"kernel"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	Go         string `json:"go"`
}

type suiteResult struct {
	Group   string        `json:"group"`
	Name    string        `json:"name"`
	Metric  string        `json:"metric"`
	Higher  bool          `json:"higher_is_better"`
	Skipped string        `json:"skipped,omitempty"`
	Notes   []string      `json:"notes,omitempty"`
	Also    []string      `json:"also_charted,omitempty"`
	Cases   []*caseResult `json:"cases"`
	// Rows pivot the cases: one per config, with the median of Metric for
	// each impl and zeroio's ratio to the best peer.
	Rows []row `json:"rows"`
	// AlsoRows pivot the units of Also the same way, unit by unit.
	AlsoRows []row    `json:"also_rows,omitempty"`
	Impls    []string `json:"impls"`
}

type row struct {
	Config string `json:"config"`
	// Unit is what the row is judged by: the suite's metric, or, for cases
	// that do not report it, their own main metric.
	Unit    string             `json:"unit"`
	Higher  bool               `json:"higher_is_better"`
	Medians map[string]float64 `json:"medians"`
	// Ratio is how many times better the best zeroio impl is than the best
	// peer in Metric (above 1: zeroio wins), 0 when either is missing.
	Ratio    float64 `json:"ratio"`
	BestZero string  `json:"best_zeroio,omitempty"`
	BestPeer string  `json:"best_peer,omitempty"`
	// P is the two-sided p-value of the Mann-Whitney U test between the
	// samples of BestZero and BestPeer (benchstat's test): at 0.05 or
	// more the ratio is within the noise. 0 when there is no ratio.
	P float64 `json:"p,omitempty"`
	// Floor is how many times better the best zeroio impl is than the
	// floor (c-floor: what the kernel's part of the job costs), with FloorP
	// the p-value of that comparison; 0 when the config has no floor. A
	// zeroio below a peer but level with the floor spends nothing above
	// what any relay must.
	Floor  float64 `json:"floor_ratio,omitempty"`
	FloorP float64 `json:"floor_p,omitempty"`
}

type caseResult struct {
	Suite   string             `json:"suite"`
	Group   string             `json:"group"`
	Name    string             `json:"name"`
	Impl    string             `json:"impl"`
	Config  string             `json:"config"`
	Failed  string             `json:"failed,omitempty"`
	Skipped string             `json:"skipped,omitempty"` // why a case did not run: not a failure
	Samples []sample           `json:"samples"`
	Medians map[string]float64 `json:"medians"`
	f       func(*testing.B)
}

type sample struct {
	N           int                `json:"n"`
	NsPerOp     float64            `json:"ns_per_op"`
	MBPerSec    float64            `json:"mb_per_s,omitempty"`
	BytesPerOp  float64            `json:"bytes_per_op"`
	AllocsPerOp float64            `json:"allocs_per_op"`
	Extra       map[string]float64 `json:"extra,omitempty"`
}

func newReport(o benchOptions) *report {
	return &report{Machine: readMachine(), Started: time.Now(), Count: o.count, Quick: o.quick, Full: o.full}
}

func readMachine() machine {
	m := machine{
		CPU: "unknown", Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Kernel: "unknown", GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// units lists every unit a case reports, primary first.
func (c *caseResult) values(unit string) []float64 {
	var vs []float64
	for _, s := range c.Samples {
		switch unit {
		case "ns/op":
			vs = append(vs, s.NsPerOp)
		case "MB/s":
			if s.MBPerSec > 0 {
				vs = append(vs, s.MBPerSec)
			}
		case "B/op":
			vs = append(vs, s.BytesPerOp)
		case "allocs/op":
			vs = append(vs, s.AllocsPerOp)
		default:
			if v, ok := s.Extra[unit]; ok {
				vs = append(vs, v)
			}
		}
	}
	return vs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func isZeroio(impl string) bool { return strings.HasPrefix(impl, "zeroio") }

// floorImpl is the baseline that bounds what zeroio can do on this
// machine: a minimal C program doing only the system calls the job needs
// (a relay, or a UDP sender and receiver with GSO and GRO).
const floorImpl = "c-floor"

// isBaseline reports impls that bound what is possible rather than compete
// (traffic that goes direct, with no relay in between; the C floors,
// programs with no feature): shown, never the "best peer".
func isBaseline(impl string) bool {
	return impl == "direct" || impl == "c-floor" || impl == "uring-floor" || impl == "c-mmsg"
}

// summarize computes medians, the pivot rows and the ratios.
func (r *report) summarize() {
	for _, s := range r.Suites {
		s.Higher = bench.HigherIsBetter(s.Metric)
		var configs []string
		seenCfg, seenImpl := map[string]bool{}, map[string]bool{}
		for _, c := range s.Cases {
			c.Medians = map[string]float64{}
			units := []string{"ns/op", "MB/s", "B/op", "allocs/op"}
			if len(c.Samples) > 0 {
				for k := range c.Samples[0].Extra {
					units = append(units, k)
				}
			}
			for _, u := range units {
				if m := median(c.values(u)); !math.IsNaN(m) {
					c.Medians[u] = m
				}
			}
			if !seenCfg[c.Config] {
				seenCfg[c.Config] = true
				configs = append(configs, c.Config)
			}
			if !seenImpl[c.Impl] {
				seenImpl[c.Impl] = true
				s.Impls = append(s.Impls, c.Impl)
			}
		}
		for _, cfg := range configs {
			s.Rows = append(s.Rows, pivot(s, cfg, rowUnit(s, cfg)))
		}
		for _, u := range s.Also {
			for _, cfg := range configs {
				if rw := pivot(s, cfg, u); len(rw.Medians) > 0 {
					s.AlsoRows = append(s.AlsoRows, rw)
				}
			}
		}
	}
}

// pivot makes the row of one config in unit: each impl's median, and
// zeroio's ratio to the best peer with its p-value.
func pivot(s *suiteResult, cfg, unit string) row {
	rw := row{Config: cfg, Unit: unit, Medians: map[string]float64{}}
	rw.Higher = bench.HigherIsBetter(rw.Unit)
	cases := map[string]*caseResult{} // the config's, by impl
	for _, c := range s.Cases {
		if c.Config != cfg {
			continue
		}
		cases[c.Impl] = c
		if v, ok := c.Medians[rw.Unit]; ok {
			rw.Medians[c.Impl] = v
		}
	}
	better := func(a, b float64) bool {
		if rw.Higher {
			return a > b
		}
		return a < b
	}
	var bz, bp float64
	for impl, v := range rw.Medians {
		if isBaseline(impl) {
			continue
		}
		if isZeroio(impl) {
			if rw.BestZero == "" || better(v, bz) {
				rw.BestZero, bz = impl, v
			}
		} else if rw.BestPeer == "" || better(v, bp) {
			rw.BestPeer, bp = impl, v
		}
	}
	rw.Ratio, rw.P = compare(rw, cases, rw.BestPeer)
	rw.Floor, rw.FloorP = compare(rw, cases, floorImpl)
	return rw
}

// compare returns how many times better the row's best zeroio impl is
// than impl in the row's unit, and the p-value of the two impls' samples;
// zeros when either is missing.
func compare(rw row, cases map[string]*caseResult, impl string) (ratio, p float64) {
	z, o := rw.Medians[rw.BestZero], rw.Medians[impl]
	if rw.BestZero == "" || impl == "" || z <= 0 || o <= 0 {
		return 0, 0
	}
	if ratio = z / o; !rw.Higher {
		ratio = o / z
	}
	if p = pValue(cases[rw.BestZero].values(rw.Unit), cases[impl].values(rw.Unit)); math.IsNaN(p) {
		p = 0
	}
	return ratio, p
}

// rowUnit picks the unit a config is judged by: the suite's metric if its
// cases report it, else a throughput they report, else ns/op.
func rowUnit(s *suiteResult, cfg string) string {
	var extra []string
	for _, c := range s.Cases {
		if c.Config != cfg {
			continue
		}
		if _, ok := c.Medians[s.Metric]; ok {
			return s.Metric
		}
		for u := range c.Medians {
			switch u {
			case "ns/op", "B/op", "allocs/op":
			default:
				extra = append(extra, u)
			}
		}
	}
	sort.Strings(extra)
	for _, u := range extra {
		if strings.HasSuffix(u, "/s") {
			return u
		}
	}
	if len(extra) > 0 {
		return extra[0]
	}
	return "ns/op"
}

func (r *report) failures() int {
	n := 0
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			if c.Failed != "" {
				n++
			}
		}
	}
	return n
}

// formatValue prints a metric value with 3 significant digits.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func formatRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// formatP prints a row's p-value, "~" after it when the ratio is within
// the noise (p >= 0.05), as benchstat marks it.
func formatP(rw row) string { return formatPValue(rw.P) }

func formatPValue(p float64) string {
	if p == 0 { // no ratio, or no samples to test
		return "-"
	}
	if p >= 0.05 {
		return fmt.Sprintf("%.3f ~", p)
	}
	return fmt.Sprintf("%.3f", p)
}

// writeTable prints, per suite, the medians of its metric for every impl
// and zeroio's ratio to the best peer.
func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "zeroio bench — %s, %d cores, GOMAXPROCS %d, Linux %s, %s — %s\n",
		r.Machine.CPU, r.Machine.Cores, r.Machine.GOMAXPROCS, r.Machine.Kernel, r.Machine.Go, r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "medians of %d interleaved samples; ratio = best zeroio vs best peer (above 1: zeroio is better)\n", r.Count)
	fmt.Fprintf(w, "p = Mann-Whitney U test of those two impls' samples, as benchstat's; ~ marks p >= 0.05: no significant difference\n")
	fmt.Fprintf(w, "floor = best zeroio vs %s, the minimal C program (what the kernel's part costs), where a suite runs it\n", floorImpl)
	for _, s := range r.Suites {
		dir := "lower is better"
		if s.Higher {
			dir = "higher is better"
		}
		fmt.Fprintf(w, "\n%s · Benchmark%s (%s, %s)\n", s.Group, s.Name, s.Metric, dir)
		if s.Skipped != "" {
			fmt.Fprintf(w, "  skipped: %s\n", s.Skipped)
			continue
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		writeRows(w, s, s.Rows, s.Metric)
		for _, u := range s.Also {
			var rows []row
			for _, rw := range s.AlsoRows {
				if rw.Unit == u {
					rows = append(rows, rw)
				}
			}
			if len(rows) == 0 {
				continue
			}
			dir := "lower is better"
			if bench.HigherIsBetter(u) {
				dir = "higher is better"
			}
			fmt.Fprintf(w, "  %s (%s)\n", u, dir)
			writeRows(w, s, rows, u)
		}
		for _, c := range s.Cases {
			if c.Failed != "" {
				fmt.Fprintf(w, "  FAILED %s: %s\n", c.Name, c.Failed)
			} else if c.Skipped != "" && len(c.Samples) == 0 {
				fmt.Fprintf(w, "  skipped %s: %s\n", c.Name, c.Skipped)
			}
		}
	}
}

// writeRows prints rows as a table of each impl's median, zeroio's ratio
// to the best peer, its p-value and that peer, and, when the suite runs
// the floor, zeroio's ratio to it and that p-value; a row judged by
// another unit than unit says which.
func writeRows(w io.Writer, s *suiteResult, rows []row, unit string) {
	floor, ratio := false, false
	for _, rw := range rows {
		floor = floor || rw.Floor != 0
		ratio = ratio || rw.Ratio != 0
	}
	// Only the impls with a value in these rows: "direct" has no relay
	// CPU, and a suite run without its peers would otherwise show columns
	// of dashes as if they were results; likewise the ratio columns when
	// no peer ran.
	impls := rowImpls(s, rows)
	if len(impls) == 0 {
		return // every case failed or skipped: the lines below say why
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "config\t")
	for _, im := range impls {
		fmt.Fprintf(tw, "%s\t", im)
	}
	if ratio {
		fmt.Fprint(tw, "ratio\tp\tvs\t")
	}
	if floor {
		fmt.Fprint(tw, "floor\tp\t")
	}
	fmt.Fprint(tw, "\n")
	for _, rw := range rows {
		fmt.Fprintf(tw, "%s\t", rw.Config)
		for _, im := range impls {
			v, ok := rw.Medians[im]
			if !ok {
				v = math.NaN()
			}
			fmt.Fprintf(tw, "%s\t", formatValue(v))
		}
		vs := rw.BestPeer
		if rw.Unit != unit {
			vs += " (" + rw.Unit + ")"
		}
		if ratio {
			fmt.Fprintf(tw, "%s\t%s\t%s\t", formatRatio(rw.Ratio), formatP(rw), vs)
		}
		if floor {
			fmt.Fprintf(tw, "%s\t%s\t", formatRatio(rw.Floor), formatPValue(rw.FloorP))
		}
		fmt.Fprint(tw, "\n")
	}
	tw.Flush()
}

// rowImpls returns the suite's impls, in order, that have a median in
// at least one of rows.
func rowImpls(s *suiteResult, rows []row) []string {
	var out []string
	for _, im := range s.Impls {
		for _, rw := range rows {
			if _, ok := rw.Medians[im]; ok {
				out = append(out, im)
				break
			}
		}
	}
	return out
}

// writeRaw writes every sample as a Go benchmark result line, the format
// benchstat and golang.org/x/perf/benchfmt read.
func (r *report) writeRaw(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "goos: %s\ngoarch: %s\npkg: github.com/zeroio/zeroio/cmd/zeroio/internal/bench\ncpu: %s\n", r.Machine.GOOS, r.Machine.GOARCH, r.Machine.CPU)
	suffix := ""
	if p := r.Machine.GOMAXPROCS; p > 1 {
		suffix = fmt.Sprintf("-%d", p)
	}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			for _, sm := range c.Samples {
				fmt.Fprintf(bw, "Benchmark%s/%s%s\t%d\t%.4g ns/op", s.Name, c.Name, suffix, sm.N, sm.NsPerOp)
				if sm.MBPerSec > 0 {
					fmt.Fprintf(bw, "\t%.2f MB/s", sm.MBPerSec)
				}
				keys := make([]string, 0, len(sm.Extra))
				for k := range sm.Extra {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(bw, "\t%.4g %s", sm.Extra[k], k)
				}
				fmt.Fprintf(bw, "\t%.0f B/op\t%.0f allocs/op\n", sm.BytesPerOp, sm.AllocsPerOp)
			}
		}
	}
	return bw.Flush()
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
