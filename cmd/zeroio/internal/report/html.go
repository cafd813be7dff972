package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/bench"
)

// chart is one SVG figure of the report. Series and Points are written as
// data attributes so that a test (or a reader's script) can check that no
// series is empty.
type chart struct {
	Title  string
	Series []string
	Points []int
	SVG    template.HTML
	Legend []legendItem
}

type legendItem struct {
	Name, Color string
	Zeroio      bool
}

// palette gives every impl of a suite its own colour, the same in every
// chart (Tableau 10).
var palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff},
	{0x76, 0xb7, 0xb2, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
	{0xba, 0xb0, 0xac, 0xff},
}

func implColor(i int) color.RGBA { return palette[i%len(palette)] }

func (c *chart) addLegend(impl string, i int) {
	col := implColor(i)
	c.Legend = append(c.Legend, legendItem{impl, fmt.Sprintf("#%02x%02x%02x", col.R, col.G, col.B), isZeroio(impl)})
}

type htmlSuite struct {
	*Suite
	Charts      []chart
	AllocCharts []chart
	NoAllocs    bool
	// Ran: some case has samples. Without, there are no allocations
	// to speak of ("0 allocs/op" would be a result no case gave).
	Ran   bool
	Table template.HTML
}

// xKeys are the config keys that make a good x axis, in preference order.
var xKeys = []string{"n", "size", "retries"}

// configParts splits "mode=serial/size=64" into its ordered key=value pairs.
func configParts(cfg string) [][2]string {
	var out [][2]string
	for _, e := range strings.Split(cfg, "/") {
		if e == "" {
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			k, v = "case", e
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// xKey picks the numeric config key to plot along x, or "".
func xKey(s *Suite) string {
	for _, k := range xKeys {
		vals := map[string]bool{}
		numeric := true
		present := true
		for _, rw := range s.Rows {
			found := false
			for _, p := range configParts(rw.Config) {
				if p[0] == k {
					found = true
					vals[p[1]] = true
					if _, err := strconv.ParseFloat(p[1], 64); err != nil {
						numeric = false
					}
				}
			}
			present = present && found
		}
		if present && numeric && len(vals) > 1 {
			return k
		}
	}
	return ""
}

// medianOf returns the median of unit for the case with this config and
// impl.
func medianOf(s *Suite, cfg, impl, unit string) (float64, bool) {
	for _, c := range s.Cases {
		if c.Config == cfg && c.Impl == impl {
			v, ok := c.Medians[unit]
			return v, ok
		}
	}
	return 0, false
}

// charts draws unit for a suite: line charts along a numeric key when the
// configs have one (a chart per combination of the other keys), else one
// bar chart over the configs.
func suiteCharts(s *Suite, unit string, logY bool) ([]chart, error) {
	xk := xKey(s)
	if xk == "" {
		c, err := barChart(s, unit)
		if err != nil || c == nil {
			return nil, err
		}
		return []chart{*c}, nil
	}
	// Group configs by the other keys.
	groups := map[string][]string{}
	var order []string
	for _, rw := range s.Rows {
		var rest []string
		for _, p := range configParts(rw.Config) {
			if p[0] != xk {
				rest = append(rest, p[0]+"="+p[1])
			}
		}
		g := strings.Join(rest, " ")
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], rw.Config)
	}
	var out []chart
	for _, g := range order {
		c, err := lineChart(s, unit, xk, g, groups[g], logY)
		if err != nil {
			return nil, err
		}
		if c != nil {
			out = append(out, *c)
		}
	}
	return out, nil
}

// lineChart draws unit for the configs of one group (g names the values
// of their other keys) along the numeric key xk, a line per impl; nil
// when no impl has a value.
func lineChart(s *Suite, unit, xk, g string, cfgs []string, logY bool) (*chart, error) {
	p := plot.New()
	title := strings.TrimSpace(fmt.Sprintf("Benchmark%s %s", s.Name, g)) + " — " + unit
	p.Title.Text = title
	p.X.Label.Text = xk
	p.Y.Label.Text = unit
	var xs []float64
	c := &chart{Title: title}
	allPositive := true
	for i, impl := range s.Impls {
		var pts plotter.XYs
		for _, cfg := range cfgs {
			v, ok := medianOf(s, cfg, impl, unit)
			if !ok || math.IsNaN(v) {
				continue
			}
			for _, pp := range configParts(cfg) {
				if pp[0] == xk {
					x, _ := strconv.ParseFloat(pp[1], 64)
					pts = append(pts, plotter.XY{X: x, Y: v})
					xs = append(xs, x)
				}
			}
			allPositive = allPositive && v > 0
		}
		if len(pts) == 0 {
			continue
		}
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color = implColor(i)
		l.Width = vg.Points(1.5)
		if isZeroio(impl) {
			l.Width = vg.Points(3.5)
		}
		sc.Color = implColor(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		c.addLegend(impl, i)
		c.Series = append(c.Series, impl)
		c.Points = append(c.Points, len(pts))
	}
	if len(c.Series) == 0 {
		return nil, nil
	}
	sort.Float64s(xs)
	if xs[0] > 0 && xs[len(xs)-1]/xs[0] >= 16 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if logY && allPositive {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	svg, err := renderSVG(p, 7, 4.2)
	if err != nil {
		return nil, err
	}
	c.SVG = svg
	return c, nil
}

func barChart(s *Suite, unit string) (*chart, error) {
	p := plot.New()
	title := fmt.Sprintf("Benchmark%s — %s", s.Name, unit)
	p.Title.Text = title
	p.Y.Label.Text = unit
	var names []string
	for _, rw := range s.Rows {
		names = append(names, rw.Config)
	}
	c := &chart{Title: title}
	n := len(s.Impls)
	w := vg.Points(math.Max(4, 60/float64(n)))
	for i, impl := range s.Impls {
		vals := make(plotter.Values, len(s.Rows))
		count := 0
		for j, rw := range s.Rows {
			if v, ok := medianOf(s, rw.Config, impl, unit); ok && !math.IsNaN(v) {
				vals[j] = v
				count++
			}
		}
		if count == 0 {
			continue
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.Color = implColor(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(b)
		c.addLegend(impl, i)
		c.Series = append(c.Series, impl)
		c.Points = append(c.Points, count)
	}
	if len(c.Series) == 0 {
		return nil, nil
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 8
	p.X.Tick.Label.XAlign = -0.9
	svg, err := renderSVG(p, 7, 4.2)
	if err != nil {
		return nil, err
	}
	c.SVG = svg
	return c, nil
}

func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
}

func renderSVG(p *plot.Plot, w, h float64) (template.HTML, error) {
	wt, err := p.WriterTo(vg.Length(w)*vg.Inch, vg.Length(h)*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", err
	}
	svg := buf.String()
	if i := strings.Index(svg, "<svg"); i > 0 {
		svg = svg[i:] // drop the XML prolog: the SVG is inline
	}
	return template.HTML(svg), nil
}

// rowUnits lists the units a suite's rows are judged by, in order.
func rowUnits(s *Suite) []string {
	var us []string
	for _, rw := range s.Rows {
		if !slices.Contains(us, rw.Unit) {
			us = append(us, rw.Unit)
		}
	}
	return us
}

// pivotHTML renders the suite's rows as a table of medians and ratios.
func pivotHTML(s *Suite, withRatio bool) template.HTML {
	rows := append(s.Rows[:len(s.Rows):len(s.Rows)], s.AlsoRows...)
	// As in the text table, only the impls with a value in some row,
	// and no table at all when every case failed or skipped.
	impls := rowImpls(s, rows)
	if len(impls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("<table><tr><th>config</th><th>unit</th>")
	for _, im := range impls {
		fmt.Fprintf(&b, "<th>%s</th>", template.HTMLEscapeString(im))
	}
	if withRatio {
		b.WriteString("<th>zeroio vs best peer</th>")
	}
	b.WriteString("</tr>")
	for _, rw := range rows {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td>", template.HTMLEscapeString(rw.Config), template.HTMLEscapeString(rw.Unit))
		for _, im := range impls {
			v, ok := medianOf(s, rw.Config, im, rw.Unit)
			if !ok {
				v = math.NaN()
			}
			cls := ""
			if im == rw.BestZero && withRatio {
				cls = ` class="z"`
			}
			fmt.Fprintf(&b, "<td%s>%s</td>", cls, FormatValue(v))
		}
		if withRatio {
			cls := "win"
			if rw.Ratio > 0 && rw.Ratio < 1 {
				cls = "loss"
			}
			fmt.Fprintf(&b, `<td class="%s">%s %s (p %s)`, cls, FormatRatio(rw.Ratio), template.HTMLEscapeString(rw.BestPeer), FormatP(rw))
			if rw.Floor != 0 {
				fmt.Fprintf(&b, `<br>%s %s (p %s)`, FormatRatio(rw.Floor), floorImpl, formatPValue(rw.FloorP))
			}
			b.WriteString("</td>")
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	return template.HTML(b.String())
}

var reportTmpl = template.Must(template.Must(template.New("report").Parse(figTmpl)).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>zeroio bench — {{.R.Started.UTC.Format "2006-01-02"}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}
table{border-collapse:collapse;font-size:13px;margin:.6em 0 1.2em;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}
td.z{font-weight:bold}td.win{color:#0a6d2c;font-weight:bold}td.loss{color:#b00020;font-weight:bold}
figure{display:inline-block;margin:.5em 1em .5em 0}figure svg{max-width:100%;height:auto}
.note{color:#555}.skipped{color:#b00020}section{margin-bottom:2.5em}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{color:#666}
figcaption{font-size:13px;max-width:672px}figcaption span{display:inline-block;margin-right:12px;white-space:nowrap}
figcaption i{display:inline-block;width:14px;height:4px;vertical-align:middle;margin-right:4px}figcaption b i{height:7px}
</style></head><body>
<h1>zeroio against its peers</h1>
<p class="sub">Medians of {{.R.Count}} samples per benchmark, taken interleaved (every implementation once per round) so drift on a shared machine hits all alike. Ratios: best zeroio implementation against the best peer, above 1 means zeroio is better; p is the Mann-Whitney U test of those two implementations' samples (benchstat's test) or, in a suite marked paired, where each round is one measurement interleaving every implementation, the paired t-test of their log-ratios round by round; ~ marks p ≥ 0.05, a ratio within the noise. Where a suite runs the minimal C program (c-floor: a relay, or a UDP sender and receiver; the kernel's part of the job), the best zeroio implementation's ratio to it follows.</p>
<dl>
<dt>date</dt><dd>{{.R.Started.UTC.Format "2006-01-02 15:04 UTC"}} ({{.Duration}})</dd>
<dt>CPU</dt><dd>{{.R.Machine.CPU}}</dd>
<dt>cores</dt><dd>{{.R.Machine.Cores}} (GOMAXPROCS {{.R.Machine.GOMAXPROCS}})</dd>
<dt>kernel</dt><dd>{{.R.Machine.GOOS}}/{{.R.Machine.GOARCH}} {{.R.Machine.Kernel}}</dd>
<dt>Go</dt><dd>{{.R.Machine.Go}}</dd>
<dt>mode</dt><dd>{{if .R.Quick}}--quick (a smoke run: too short to judge by){{else if .R.Full}}--full (every configuration){{else}}default (representative configurations; --full runs all){{end}}</dd>
</dl>
{{range .Suites}}<section id="{{.Group}}-{{.Name}}">
<h2>{{.Group}} · Benchmark{{.Name}}</h2>
{{if .Skipped}}<p class="skipped">Skipped: {{.Skipped}}</p>{{else}}
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
<p class="note">{{.Metric}}, {{if .Higher}}higher{{else}}lower{{end}} is better.</p>
{{range .Charts}}{{template "fig" .}}{{end}}
{{.Table}}
{{range .Cases}}{{if .Failed}}<p class="skipped">Failed {{.Name}}: {{.Failed}}</p>
{{else if and .Skipped (not .Samples)}}<p class="note">Skipped {{.Name}}: {{.Skipped}}</p>
{{end}}{{end}}{{if .Ran}}<h3>Allocations (allocs/op)</h3>
{{if .NoAllocs}}<p class="note">Every implementation: 0 allocs/op.</p>{{else}}
{{range .AllocCharts}}{{template "fig" .}}{{end}}{{end}}{{end}}
{{end}}</section>
{{end}}
<p class="note">Raw results: bench.txt (for benchstat), results.json. Made by <code>zeroio bench</code>.</p>
</body></html>
`))

const figTmpl = `{{define "fig"}}<figure class="chart" data-title="{{.Title}}" data-series="{{range $i, $s := .Series}}{{if $i}},{{end}}{{$s}}{{end}}" data-points="{{range $i, $p := .Points}}{{if $i}},{{end}}{{$p}}{{end}}">{{.SVG}}
<figcaption>{{range .Legend}}<span>{{if .Zeroio}}<b><i style="background:{{.Color}}"></i>{{.Name}}</b>{{else}}<i style="background:{{.Color}}"></i>{{.Name}}{{end}}</span>{{end}}</figcaption></figure>
{{end}}`

func (r *Report) WriteHTML(w io.Writer) error {
	var suites []htmlSuite
	for _, s := range r.Suites {
		hs := htmlSuite{Suite: s}
		if s.Skipped == "" && len(s.Rows) > 0 {
			charts := func(s *Suite, u string) error {
				cs, err := suiteCharts(s, u, !bench.HigherIsBetter(u))
				hs.Charts = append(hs.Charts, cs...)
				return err
			}
			for _, u := range rowUnits(s) {
				sub := *s
				sub.Rows = nil
				for _, rw := range s.Rows {
					if rw.Unit == u {
						sub.Rows = append(sub.Rows, rw)
					}
				}
				if err := charts(&sub, u); err != nil {
					return err
				}
			}
			for _, u := range s.Also {
				if err := charts(s, u); err != nil {
					return err
				}
			}
			// No ratio column when no peer ran (all skipped): a column
			// of "-" is no result.
			hasRatio := func(rw Row) bool { return rw.Ratio != 0 }
			hs.Table = pivotHTML(s, slices.ContainsFunc(s.Rows, hasRatio) || slices.ContainsFunc(s.AlsoRows, hasRatio))
			any := false
			for _, c := range s.Cases {
				any = any || c.Medians["allocs/op"] > 0
				hs.Ran = hs.Ran || len(c.Samples) > 0
			}
			hs.NoAllocs = !any
			if any {
				var err error
				if hs.AllocCharts, err = suiteCharts(s, "allocs/op", false); err != nil {
					return err
				}
			}
		}
		suites = append(suites, hs)
	}
	return reportTmpl.Execute(w, map[string]any{
		"R":        r,
		"Suites":   suites,
		"Duration": r.Finished.Sub(r.Started).Round(1e9).String(),
	})
}
