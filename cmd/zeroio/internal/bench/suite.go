package bench

import (
	"sort"
	"strings"
	"testing"
)

// A Case is one benchmark of a suite.
type Case struct {
	// Name is the path below the suite's Benchmark function, key=value
	// elements with impl last so benchstat can pivot on it:
	// "mode=serial/size=4096/impl=zeroio-sized".
	Name string
	// F is the benchmark body. It calls b.ReportAllocs and b.SetBytes
	// itself and may report extra metrics.
	F func(b *testing.B)
}

// A Suite is one Benchmark function's worth of cases.
type Suite struct {
	// Group is what `zeroio bench --suite` selects: pool, udp, splice,
	// relay, relay-udp, relay-http, relay-tls, relay-quic, quic.
	Group string
	// Name is the Benchmark function's name without "Benchmark": "Pool"
	// runs as BenchmarkPool.
	Name string
	// Cases returns the cases for a scale.
	Cases func(sc Scale) []Case
	// Available reports why the suite cannot run here ("" if it can):
	// missing external programs or kernel features.
	Available func() string
	// Metric is the unit the suite is judged by: "ns/op" (the default),
	// "MB/s", or a unit the cases report with b.ReportMetric.
	Metric string
	// AlsoChart lists further units the report draws charts of (relay CPU
	// seconds per GiB beside its throughput).
	AlsoChart []string
	// Notes reports what the suite found about its peers ("haproxy: not
	// on PATH, skipped"), for the report.
	Notes func() []string
	// Paired says that the cases of a config take their samples from
	// shared measurements, one per round, that interleave the impls
	// (RelayLatency): the report compares two impls round by round, which
	// cancels what the machine did differently from one round to the
	// next.
	Paired bool
}

// HigherIsBetter reports whether larger values of unit are better.
func HigherIsBetter(unit string) bool {
	switch {
	case unit == "ns/op", unit == "sec/op", unit == "B/op", unit == "allocs/op":
		return false
	case strings.Contains(unit, "cpu"), strings.Contains(unit, "lat"),
		strings.HasSuffix(unit, "ns"), strings.HasSuffix(unit, "µs"), strings.HasSuffix(unit, "ms"),
		strings.HasSuffix(unit, "/conn"), strings.HasSuffix(unit, "/req"), strings.HasSuffix(unit, "/session"),
		unit == "pipes", unit == "lost", unit == "retries":
		return false
	case strings.HasSuffix(unit, "/s"), strings.HasPrefix(unit, "delivered"):
		return true
	}
	return true
}

// Scale says how much of a suite to run.
type Scale int

const (
	// Quick is a smoke run: every suite in seconds (CI).
	Quick Scale = iota
	// Default is what `zeroio bench` runs with no flags: the configurations
	// that show each comparison, in a few minutes on 2 cores.
	Default
	// Full is every configuration: `go test -bench` and `zeroio bench --full`.
	Full
)

var registry []Suite

func register(s Suite) { registry = append(registry, s) }

// Suites returns every registered suite, by group then name.
func Suites() []Suite {
	out := append([]Suite(nil), registry...)
	sort.SliceStable(out, func(i, j int) bool {
		return groupOrder(out[i].Group) < groupOrder(out[j].Group)
	})
	return out
}

// Groups lists the suite groups in the order they run.
var Groups = []string{"pool", "udp", "splice", "relay", "relay-udp", "relay-http", "relay-tls", "relay-quic", "quic"}

func groupOrder(g string) int {
	for i, x := range Groups {
		if x == g {
			return i
		}
	}
	return len(Groups)
}

// Impl returns the impl element of a case name ("zeroio-sized").
func Impl(name string) string {
	i := strings.LastIndex(name, "impl=")
	if i < 0 {
		return ""
	}
	rest := name[i+len("impl="):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// Config returns a case name without its impl element: the cases that
// share it measure the same thing with different implementations.
func Config(name string) string {
	var keep []string
	for _, e := range strings.Split(name, "/") {
		if !strings.HasPrefix(e, "impl=") {
			keep = append(keep, e)
		}
	}
	return strings.Join(keep, "/")
}
