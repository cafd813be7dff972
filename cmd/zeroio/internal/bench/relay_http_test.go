package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

func BenchmarkRelayHTTP(b *testing.B) { useZeroio(b); runSuite(b, "RelayHTTP") }

var zeroioBuild struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if zeroioBuild.dir != "" {
		os.RemoveAll(zeroioBuild.dir)
	}
	os.Exit(code)
}

// useZeroio points ZeroioCommand at $ZEROIO_COMMAND if set, else at the
// zeroio command of this tree, built once. If that cannot be built (a test
// binary run outside the module) the zeroio cells skip, saying why.
func useZeroio(tb testing.TB) {
	tb.Helper()
	zeroioBuild.once.Do(func() {
		if exe := os.Getenv("ZEROIO_COMMAND"); exe != "" {
			ZeroioCommand = exe
			return
		}
		if _, err := exec.LookPath("go"); err != nil {
			zeroioBuild.err = err
			return
		}
		dir, err := os.MkdirTemp("", "zeroio-bench-bin")
		if err != nil {
			zeroioBuild.err = err
			return
		}
		zeroioBuild.dir = dir
		exe := filepath.Join(dir, "zeroio")
		out, err := exec.Command("go", "build", "-o", exe, "github.com/zeroio/zeroio/cmd/zeroio").CombinedOutput()
		if err != nil {
			zeroioBuild.err = &buildError{err, string(out)}
			return
		}
		ZeroioCommand = exe
	})
	if zeroioBuild.err != nil {
		tb.Logf("building zeroio (set ZEROIO_COMMAND to use a built one): %v", zeroioBuild.err)
	}
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func TestParseWrk(t *testing.T) {
	const keepAlive = `Running 2s test @ http://127.0.0.1:18080/1k.bin
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   457.41us  102.12us   3.39ms   87.63%
    Req/Sec   133.12k     6.19k  139.90k    80.95%
  Latency Distribution
     50%  465.00us
     75%  481.00us
     90%  505.00us
     99%  636.00us
  277410 requests in 2.10s, 334.40MB read
Requests/sec: 132085.79
Transfer/sec:    159.22MB
`
	const withErrors = `Running 1s test @ http://127.0.0.1:18080/nope
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    16.28ms   34.63ms 172.79ms   86.32%
    Req/Sec    20.10k    17.18k   39.80k    44.44%
  Latency Distribution
     50%  146.00us
     75%    7.52ms
     90%   68.71ms
     99%    1.41s
  18764 requests in 1.00m, 5.42MB read
  Socket errors: connect 2, read 30, write 1, timeout 4
  Non-2xx or 3xx responses: 18764
Requests/sec:  18730.17
Transfer/sec:      5.41MB
`
	for _, c := range []struct {
		name, out string
		want      wrkResult
		err       string
	}{
		{"keepalive", keepAlive, wrkResult{Requests: 277410, Seconds: 2.1, P99: 636 * time.Microsecond}, ""},
		{"errors", withErrors, wrkResult{Requests: 18764, Seconds: 60, P99: 1410 * time.Millisecond, Errors: 37, Non2xx: 18764}, ""},
		{"no latency", strings.Replace(keepAlive, "     99%  636.00us\n", "", 1), wrkResult{}, "99%"},
		{"no requests", strings.Replace(keepAlive, "277410 requests in", "", 1), wrkResult{}, "requests in"},
		{"bad unit", strings.Replace(keepAlive, "636.00us", "636.00xs", 1), wrkResult{}, "bad duration"},
		{"bad count", strings.Replace(keepAlive, "277410", "27x410", 1), wrkResult{}, "requests line"},
		{"bad errors", strings.Replace(withErrors, "read 30", "read many", 1), wrkResult{}, "socket errors"},
		{"usage", "Usage: wrk <options> <url>\n  Options:\n", wrkResult{}, "requests in"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseWrk(c.out)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Durations parse through floats: compare within a nanosecond.
			if d := got.P99 - c.want.P99; d < -1 || d > 1 {
				t.Errorf("p99 = %v, want %v", got.P99, c.want.P99)
			}
			got.P99 = c.want.P99
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// runCase runs one case of a suite as zeroio bench does and returns its
// metrics, failing t with the case's own message.
func runCase(t *testing.T, f func(b *testing.B)) map[string]float64 {
	t.Helper()
	var why string
	var skipped bool
	r := testing.Benchmark(func(b *testing.B) {
		defer func() {
			if b.Failed() || b.Skipped() {
				why, skipped = Reason(b), b.Skipped()
			}
		}()
		f(b)
	})
	switch {
	case skipped:
		t.Skip(why)
	case r.N == 0:
		t.Fatalf("case failed: %s", why)
	}
	return r.Extra
}

// TestRelayHTTPSmoke runs every relay of the HTTP suite through one short
// wrk run of the connection-churn workload, as zeroio bench --quick does
// (cmd/zeroio's TestBenchQuick runs every workload).
func TestRelayHTTPSmoke(t *testing.T) {
	if why := needTools("nginx", "wrk"); why != "" {
		t.Skip(why)
	}
	if percpu.RaceEnabled {
		t.Skip("the suite's relays under the race detector measure the detector")
	}
	useZeroio(t)
	for _, c := range relayHTTPCases(Quick) {
		if !strings.HasPrefix(c.Name, "load=close/") {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			m := runCase(t, c.F)
			if m["req/s"] <= 0 || m["p99-µs"] <= 0 {
				t.Errorf("metrics %v: want req/s and p99-µs above 0", m)
			}
			if _, ok := m["cpu-µs/req"]; ok == (Impl(c.Name) == "direct") {
				t.Errorf("metrics %v: cpu-µs/req is for relays only", m)
			}
		})
	}
}

// TestZeroioEngines: the suites find the engines `zeroio relay --engine`
// takes (through --help and --check-config) and give each a cell above
// the Quick scale, which runs the default engine alone.
func TestZeroioEngines(t *testing.T) {
	useZeroio(t)
	if ZeroioCommand == "" {
		t.Skip("no zeroio executable to ask")
	}
	want := []string{"goroutine"}
	if runtime.GOOS == "linux" {
		want = []string{"event", "goroutine"}
	}
	if got := zeroioEngines(); !slices.Equal(got, want) {
		t.Fatalf("engines %q, want %q", got, want)
	}
	if got := zeroioImpls(Quick); !slices.Equal(got, []string{"zeroio"}) {
		t.Errorf("Quick cells %q, want zeroio alone", got)
	}
	wantImpls := []string{"zeroio"}
	for _, e := range want {
		wantImpls = append(wantImpls, "zeroio-"+e)
	}
	if got := zeroioImpls(Default); !slices.Equal(got, wantImpls) {
		t.Errorf("Default cells %q, want %q", got, wantImpls)
	}
}

// TestCFloorRelays checks the C floor on its own: bytes intact both ways
// through many concurrent streams, half-close passed on.
func TestCFloorRelays(t *testing.T) {
	if why := cfloorWhyNot(); why != "" {
		t.Skip(why)
	}
	runCase(t, func(b *testing.B) { runRelayStreams(b, "c-floor", 200, 64<<10) })
}

// TestURingFloorRelays checks the io_uring relay the same way.
func TestURingFloorRelays(t *testing.T) {
	if why := uring.whyNot(); why != "" {
		t.Skip(why)
	}
	runCase(t, func(b *testing.B) { runRelayStreams(b, "uring-floor", 200, 64<<10) })
}

// An nginx that fails before its error log is open says why only on
// stderr: startNginx must pass that on, not "did not listen on ...: ".
func TestStartNginxSaysWhy(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the HTTP suite runs on linux only")
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\necho 'nginx: [alert] could not open error log file' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "nginx"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	n, err := startNginx()
	if err == nil {
		n.stop()
		t.Fatal("startNginx with an nginx that exits at once: no error")
	}
	if !strings.Contains(err.Error(), "could not open error log file") {
		t.Errorf("error %q does not say what nginx said", err)
	}
}
