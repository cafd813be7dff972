package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads the relay's /metrics and parses it as the Prometheus text
// format, failing the test on anything a Prometheus server would refuse.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not valid text exposition: %v", err)
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		if !model.LegacyValidation.IsValidMetricName(name) {
			t.Errorf("metric name %q", name)
		}
		seen := map[string]bool{}
		for _, m := range f.Metric {
			k := labelKey(m)
			if seen[k] {
				t.Errorf("%s%s twice", name, k)
			}
			seen[k] = true
		}
	}
	return fams
}

func labelKey(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.Label {
		fmt.Fprintf(&b, "%s=%q,", l.GetName(), l.GetValue())
	}
	return "{" + b.String() + "}"
}

// counters returns every counter sample by name and labels.
func counters(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range f.Metric {
			out[name+labelKey(m)] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestMetricsExposition: /metrics parses as Prometheus text for routes of
// every kind (names needing escapes, routes sharing an address by SNI,
// UDP, Unix), and no counter of a route that a reload keeps goes down,
// whether the reload changes its workers, targets or listen address.
func TestMetricsExposition(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	backend2 := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	udpBackend := udpEchoServer(t).LocalAddr().String()
	metrics, l1, l2, l3 := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	sock := filepath.Join(t.TempDir(), "m.sock")
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	// write writes the config with the first route's listen address and
	// the rest of its fields.
	write := func(plainListen, rest string) {
		os.WriteFile(conf, fmt.Appendf(nil, `routes:
  - {name: "we\"ird\\name", listen: tcp://%s, %s}
  - {name: sni-a, listen: tcp://%s, sni: [a.example], target: tcp://%s}
  - {name: sni-default, listen: tcp://%s, target: tcp://%s}
  - {name: udp, listen: udp://127.0.0.1:0, target: udp://%s}
  - {name: unix, listen: unix://%s, target: tcp://%s}
`, plainListen, rest, l2, backend, l2, backend, udpBackend, sock, backend), 0o644)
	}
	write(l1, "target: tcp://"+backend)
	p := startProc(t, 5, "-c", conf, "--metrics", metrics)
	traffic := func(addr string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		ping(t, c)
		c.Close()
	}
	traffic(l1)
	traffic(l2)
	before := counters(scrape(t, metrics))
	if before[`zeroio_relay_connections_accepted_total{route="we\"ird\\name",}`] == 0 {
		t.Fatalf("no connection counted: %v", before)
	}

	two := "targets: [tcp://" + backend + ", tcp://" + backend2 + "]"
	reloads := []struct{ listen, rest string }{
		{l1, "target: tcp://" + backend + ", workers: 2"},
		{l1, two + ", workers: 2"},
		{l3, two + ", workers: 2"},
	}
	for i, r := range reloads {
		write(r.listen, r.rest)
		p.cmd.Process.Signal(syscall.SIGHUP)
		p.waitLog(t, "reloaded", i+1)
		if len(p.logs("reload failed; keeping the running config")) > 0 {
			t.Fatalf("reload %d failed", i+1)
		}
		traffic(r.listen)
		after := counters(scrape(t, metrics))
		for k, v := range before {
			if a, ok := after[k]; ok && a < v {
				t.Errorf("reload %d: %s went from %v to %v", i+1, k, v, a)
			}
		}
		before = after
	}
}
