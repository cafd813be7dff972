package report

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
)

// FormatValue prints a metric value with 3 significant digits.
func FormatValue(v float64) string {
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

func FormatRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// FormatP prints a row's p-value, "~" after it when the ratio is within
// the noise (p >= 0.05), as benchstat marks it.
func FormatP(rw Row) string { return formatPValue(rw.P) }

func formatPValue(p float64) string {
	if p == 0 { // no ratio, or no samples to test
		return "-"
	}
	if p >= 0.05 {
		return fmt.Sprintf("%.3f ~", p)
	}
	return fmt.Sprintf("%.3f", p)
}

// WriteTable prints, per suite, the medians of its metric for every impl
// and zeroio's ratio to the best peer.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "zeroio bench — %s, %d cores, GOMAXPROCS %d, Linux %s, %s — %s\n",
		r.Machine.CPU, r.Machine.Cores, r.Machine.GOMAXPROCS, r.Machine.Kernel, r.Machine.Go, r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "medians of %d interleaved samples; ratio = best zeroio vs best peer (above 1: zeroio is better)\n", r.Count)
	fmt.Fprintf(w, "p = Mann-Whitney U test of those two impls' samples, as benchstat's (suites marked paired: paired t-test\n")
	fmt.Fprintf(w, "    of their log-ratios round by round, each round one interleaved measurement); ~ marks p >= 0.05: no significant difference\n")
	fmt.Fprintf(w, "floor = best zeroio vs %s, the minimal C program (what the kernel's part costs), where a suite runs it\n", floorImpl)
	for _, s := range r.Suites {
		dir := "lower is better"
		if s.Higher {
			dir = "higher is better"
		}
		if s.Paired {
			dir += ", paired"
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
			var rows []Row
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
func writeRows(w io.Writer, s *Suite, rows []Row, unit string) {
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
			fmt.Fprintf(tw, "%s\t", FormatValue(v))
		}
		vs := rw.BestPeer
		if rw.Unit != unit {
			vs += " (" + rw.Unit + ")"
		}
		if ratio {
			fmt.Fprintf(tw, "%s\t%s\t%s\t", FormatRatio(rw.Ratio), FormatP(rw), vs)
		}
		if floor {
			fmt.Fprintf(tw, "%s\t%s\t", FormatRatio(rw.Floor), formatPValue(rw.FloorP))
		}
		fmt.Fprint(tw, "\n")
	}
	tw.Flush()
}

// rowImpls returns the suite's impls, in order, that have a median in
// at least one of rows.
func rowImpls(s *Suite, rows []Row) []string {
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
