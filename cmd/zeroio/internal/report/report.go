package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
)

// Report is everything zeroio bench measured, and what results.json holds.
type Report struct {
	Machine  Machine   `json:"machine"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Count    int       `json:"count"`
	Quick    bool      `json:"quick"`
	Full     bool      `json:"full"`
	Suites   []*Suite  `json:"suites"`
}

// Machine describes where the report was measured.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Kernel     string `json:"kernel"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	Go         string `json:"go"`
}

// Suite is one benchmark suite: its cases and their pivot rows.
type Suite struct {
	Group   string   `json:"group"`
	Name    string   `json:"name"`
	Metric  string   `json:"metric"`
	Higher  bool     `json:"higher_is_better"`
	Skipped string   `json:"skipped,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	Also    []string `json:"also_charted,omitempty"`
	// Paired says that each round's samples of a config come from one
	// measurement that interleaved the impls (bench.Suite.Paired): they
	// are compared round by round.
	Paired bool    `json:"paired,omitempty"`
	Cases  []*Case `json:"cases"`
	// Rows pivot the cases: one per config, with the median of Metric for
	// each impl and zeroio's ratio to the best peer.
	Rows []Row `json:"rows"`
	// AlsoRows pivot the units of Also the same way, unit by unit.
	AlsoRows []Row    `json:"also_rows,omitempty"`
	Impls    []string `json:"impls"`
}

// Row is one configuration of a suite, judged in one unit.
type Row struct {
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
	// samples of BestZero and BestPeer (benchstat's test) or, in a paired
	// suite, of the paired t-test of their log-ratios round by round: at
	// 0.05 or more the ratio is within the noise. 0 when there is no
	// ratio.
	P float64 `json:"p,omitempty"`
	// Floor is how many times better the best zeroio impl is than the
	// floor (c-floor: what the kernel's part of the job costs), with FloorP
	// the p-value of that comparison; 0 when the config has no floor. A
	// zeroio below a peer but level with the floor spends nothing above
	// what any relay must.
	Floor  float64 `json:"floor_ratio,omitempty"`
	FloorP float64 `json:"floor_p,omitempty"`
}

// Case is one benchmark (one impl in one configuration) and its samples.
type Case struct {
	Suite   string             `json:"suite"`
	Group   string             `json:"group"`
	Name    string             `json:"name"`
	Impl    string             `json:"impl"`
	Config  string             `json:"config"`
	Failed  string             `json:"failed,omitempty"`
	Skipped string             `json:"skipped,omitempty"` // why a case did not run: not a failure
	Samples []Sample           `json:"samples"`
	Medians map[string]float64 `json:"medians"`
}

// Sample is one run of a case: a testing.BenchmarkResult per op.
type Sample struct {
	N           int                `json:"n"`
	NsPerOp     float64            `json:"ns_per_op"`
	MBPerSec    float64            `json:"mb_per_s,omitempty"`
	BytesPerOp  float64            `json:"bytes_per_op"`
	AllocsPerOp float64            `json:"allocs_per_op"`
	Extra       map[string]float64 `json:"extra,omitempty"`
}

// New starts a report on this machine, now, of count rounds; quick and
// full say which scale of zeroio bench ran.
func New(count int, quick, full bool) *Report {
	return &Report{Machine: ReadMachine(), Started: time.Now(), Count: count, Quick: quick, Full: full}
}

func ReadMachine() Machine {
	m := Machine{
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

// values lists the case's samples of unit.
func (c *Case) values(unit string) []float64 {
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

// Summarize computes medians, the pivot rows and the ratios.
func (r *Report) Summarize() {
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
func pivot(s *Suite, cfg, unit string) Row {
	rw := Row{Config: cfg, Unit: unit, Medians: map[string]float64{}}
	rw.Higher = bench.HigherIsBetter(rw.Unit)
	cases := map[string]*Case{} // the config's, by impl
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
	rw.Ratio, rw.P = compare(rw, cases, rw.BestPeer, s.Paired)
	rw.Floor, rw.FloorP = compare(rw, cases, floorImpl, s.Paired)
	return rw
}

// compare returns how many times better the row's best zeroio impl is
// than impl in the row's unit, and the p-value of the two impls' samples,
// round by round if paired and each has a sample of every round; zeros
// when either is missing.
func compare(rw Row, cases map[string]*Case, impl string, paired bool) (ratio, p float64) {
	z, o := rw.Medians[rw.BestZero], rw.Medians[impl]
	if rw.BestZero == "" || impl == "" || z <= 0 || o <= 0 {
		return 0, 0
	}
	if ratio = z / o; !rw.Higher {
		ratio = o / z
	}
	zv, ov := cases[rw.BestZero].values(rw.Unit), cases[impl].values(rw.Unit)
	if paired && len(zv) == len(cases[rw.BestZero].Samples) && len(ov) == len(cases[impl].Samples) && len(zv) == len(ov) {
		p = pairedPValue(zv, ov)
	} else {
		p = pValue(zv, ov)
	}
	if math.IsNaN(p) {
		p = 0
	}
	return ratio, p
}

// rowUnit picks the unit a config is judged by: the suite's metric if its
// cases report it, else a throughput they report, else ns/op.
func rowUnit(s *Suite, cfg string) string {
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

func (r *Report) Failures() int {
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

// WriteRaw writes every sample as a Go benchmark result line, the format
// benchstat and golang.org/x/perf/benchfmt read.
func (r *Report) WriteRaw(w io.Writer) error {
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

// WriteJSON writes the report as results.json holds it.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Write saves every output file in dir: table.txt, bench.txt,
// results.json and report.html.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name string
		fn   func(io.Writer) error
	}{
		{"table.txt", func(w io.Writer) error { r.WriteTable(w); return nil }},
		{"bench.txt", r.WriteRaw},
		{"results.json", r.WriteJSON},
		{"report.html", r.WriteHTML},
	}
	for _, f := range files {
		fh, err := os.Create(filepath.Join(dir, f.name))
		if err != nil {
			return err
		}
		err = f.fn(fh)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	return nil
}

// CheckDir makes dir if need be and checks that files can be created in
// it, so that a run finds out before measuring that Write would fail.
func CheckDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".probe")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
