package bench

import (
	"runtime"
	"testing"
)

func BenchmarkRelayIperf3(b *testing.B)  { runSuite(b, "RelayIperf3") }
func BenchmarkRelayIdle(b *testing.B)    { runSuite(b, "RelayIdle") }
func BenchmarkRelayUDP(b *testing.B)     { runSuite(b, "RelayUDP") }
func BenchmarkRelayLatency(b *testing.B) { runSuite(b, "RelayLatency") }
func BenchmarkRelayStreams(b *testing.B) { runSuite(b, "RelayStreams") }

// A suite that needs several programs names every one missing: relay-http
// on a fresh machine says nginx and wrk, not nginx and later wrk.
func TestNeedToolsNamesAllMissing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("relay suites: linux only")
	}
	t.Setenv("PATH", t.TempDir())
	if got, want := needTools("nginx", "wrk"), "nginx, wrk not on PATH"; got != want {
		t.Errorf("needTools = %q, want %q", got, want)
	}
	if got := needTools(); got != "" {
		t.Errorf("needTools() = %q, want \"\"", got)
	}
}

// stopAll runs StopAll for a test, and lets the tests after it start
// children again.
func stopAll(t *testing.T) {
	t.Cleanup(func() {
		children.Lock()
		children.stopping = false
		children.Unlock()
	})
	StopAll()
}
