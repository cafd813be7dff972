package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The HTTP suite: nginx as the upstream, wrk as the client, and each relay
// in between as a process of its own, for the traffic relays mostly carry:
// small requests on kept-alive connections, a new connection per request,
// and large bodies.
//
//   - direct: wrk to nginx, no relay (a baseline)
//   - zeroio: the `zeroio relay` command (ZeroioCommand), its default
//     engine, and zeroio-ENGINE per engine when it has --engine
//   - haproxy: HAProxy in mode tcp, when installed
//   - iocopy: the Go relay people write first, io.Copy both ways
//   - c-floor: a minimal C epoll relay, the kernel's share (a baseline)
//   - uring-floor: the same relay on io_uring, where liburing is
//     installed (a baseline: what a ring instead of a system call per
//     step changes)
//
// One op is one wrk run. The metrics are wrk's requests per second and
// p99 latency, and per request the relay process's CPU time (user+system,
// all its threads, from /proc/PID/stat) and the times its threads were
// switched out (each costs a sleep and a wake-up).

// httpLoad is one workload: wrk's connections fetching one body.
type httpLoad struct {
	name      string // key=value elements of the case name
	path      string // the body's URL path on nginx
	conns     int
	closeEach bool // Connection: close: a new connection per request
}

var httpLoads = []httpLoad{
	{"load=keepalive/body=1KiB/conns=64", "/1k.bin", 64, false},
	{"load=close/body=1KiB/conns=64", "/1k.bin", 64, true},
	{"load=keepalive/body=1MiB/conns=8", "/1m.bin", 8, false},
}

// httpSeconds is the length of one wrk run (wrk counts whole seconds).
func httpSeconds(sc Scale) int {
	switch sc {
	case Quick:
		return 1
	case Full:
		return 3
	}
	return 2
}

func relayHTTPCases(sc Scale) []Case {
	impls := append([]string{"direct"}, zeroioImpls(sc)...)
	if havePeer("haproxy") {
		impls = append(impls, "haproxy")
	}
	impls = append(impls, "iocopy")
	if cfloorWhyNot() == "" {
		impls = append(impls, "c-floor")
	}
	if uring.whyNot() == "" {
		impls = append(impls, "uring-floor")
	}
	secs := httpSeconds(sc)
	var cs []Case
	for _, l := range httpLoads {
		for _, impl := range impls {
			cs = append(cs, Case{fmt.Sprintf("%s/impl=%s", l.name, impl), func(b *testing.B) {
				runRelayHTTP(b, impl, l, secs)
			}})
		}
	}
	return cs
}

func runRelayHTTP(b *testing.B, impl string, l httpLoad, secs int) {
	skipWithoutZeroio(b, impl)
	ng, err := startNginx()
	if err != nil {
		fatal(b, err)
	}
	defer ng.stop()
	p, err := startHTTPRelay(impl, ng.addr)
	if err != nil {
		fatal(b, err)
	}
	defer p.stop()
	addr, pid := ng.addr, 0
	if p != nil {
		addr, pid = p.addr, p.cmd.Process.Pid
	}
	url := "http://" + addr + l.path
	if err := checkBody(url, ng.bodies[l.path]); err != nil {
		fatalf(b, "%s: %v", impl, err)
	}
	b.ReportAllocs()
	var reqs, secsRun, cpu, switches float64
	var p99 time.Duration
	b.ResetTimer()
	for range b.N {
		c0, s0 := procCPU(pid), procSwitches(pid)
		r, err := runWrk(url, l.conns, secs, l.closeEach)
		if err != nil {
			fatal(b, err)
		}
		cpu += procCPU(pid) - c0
		switches += float64(procSwitches(pid) - s0)
		// Every response must be the body nginx sent, and a relay may
		// not lose connections: a few socket errors are tolerated, as a
		// run's end cuts connections mid-request.
		if r.Non2xx > 0 || r.Errors > r.Requests/100 {
			fatalf(b, "%s: %.0f requests, %.0f non-2xx responses, %.0f socket errors", impl, r.Requests, r.Non2xx, r.Errors)
		}
		reqs += r.Requests
		secsRun += r.Seconds
		p99 = max(p99, r.P99)
	}
	b.StopTimer()
	b.ReportMetric(reqs/secsRun, "req/s")
	b.ReportMetric(float64(p99)/float64(time.Microsecond), "p99-µs")
	if pid != 0 {
		b.ReportMetric(cpu*1e6/reqs, "cpu-µs/req")
		b.ReportMetric(switches/reqs, "ctxsw/req")
	}
}

// startHTTPRelay starts impl relaying to target (host:port); nil for
// impl "direct".
func startHTTPRelay(impl, target string) (*relayProc, error) {
	switch {
	case impl == "direct":
		return nil, nil
	case strings.HasPrefix(impl, "zeroio"):
		port, err := freePort("tcp")
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		return startZeroio(impl, listen, "tcp://"+listen, "tcp://"+target)
	}
	return startRelayProc(impl, "tcp://"+target)
}

// checkBody fetches url once and compares the body with want: a relay
// that corrupts bytes fails here, not in req/s.
func checkBody(url string, want []byte) error {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		return fmt.Errorf("GET %s: status %d, %d bytes, want 200 and the %d bytes nginx serves", url, resp.StatusCode, len(got), len(want))
	}
	return nil
}

// relayHTTPNotes says what the suite ran with, and which relays it had to
// leave out and why.
func relayHTTPNotes() []string {
	notes := []string{fmt.Sprintf("wrk -t%d (one client thread), nginx worker_processes 1, %s", wrkThreads, strings.Join(loadSummary(), "; "))}
	notes = append(notes, peerNotes("haproxy")()...)
	// Their reasons start with their names.
	cfloorWhy := cfloorWhyNot()
	if cfloorWhy != "" {
		notes = append(notes, "skipped "+cfloorWhy)
	}
	if why := uring.whyNot(); why != "" {
		if cfloorWhy == "" {
			// cc works: what is missing is liburing.
			why += " (liburing-dev)"
		}
		notes = append(notes, "skipped "+why)
	}
	if ZeroioCommand == "" {
		notes = append(notes, "skipped zeroio: no zeroio executable to run")
	} else if es := zeroioEngines(); len(es) > 0 {
		notes = append(notes, "zeroio engines: "+strings.Join(es, ", ")+" (zeroio alone is the default)")
	}
	return notes
}

func loadSummary() []string {
	var s []string
	for _, l := range httpLoads {
		h := ""
		if l.closeEach {
			h = " -H 'Connection: close'"
		}
		s = append(s, fmt.Sprintf("-c%d%s GET %s", l.conns, h, l.path))
	}
	return s
}

func init() {
	register(Suite{Group: "relay-http", Name: "RelayHTTP", Cases: relayHTTPCases, Metric: "req/s",
		AlsoChart: []string{"cpu-µs/req", "ctxsw/req", "p99-µs"},
		Available: func() string { return needTools("nginx", "wrk") }, Notes: relayHTTPNotes})
}
