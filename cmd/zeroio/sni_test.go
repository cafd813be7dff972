package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// TestConfigSNI: sni, alpn, peek_timeout and listen_overlap reach
// relay.Route; --sni makes a single route, stream or UDP (QUIC);
// ambiguous routes, UDP routes sharing an address that differ in its
// settings, and --sni with a file are one-line errors.
func TestConfigSNI(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(`
routes:
  - {name: a, listen: tcp://127.0.0.1:9443, sni: [a.example.com, "*.a.example.com"], target: tcp://127.0.0.1:1, peek_timeout: 2s}
  - {name: b, listen: tcp://127.0.0.1:9443, sni: [b.example.com], alpn: [h2], target: tcp://127.0.0.1:2, peek_timeout: 2s}
  - {name: c, listen: tcp://0.0.0.0:9443, target: tcp://127.0.0.1:3, listen_overlap: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := loadFile(p, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.New(cfg); err != nil {
		t.Fatal(err)
	}
	a, b, c := cfg.Routes[0], cfg.Routes[1], cfg.Routes[2]
	if !slices.Equal(a.SNI, []string{"a.example.com", "*.a.example.com"}) || a.PeekTimeout != 2*time.Second ||
		!slices.Equal(b.ALPN, []string{"h2"}) || !c.ListenOverlap {
		t.Fatalf("routes: %+v", cfg.Routes)
	}

	f := newRelayFlags()
	if err := f.parse([]string{"tcp://127.0.0.1:9443", "tcp://127.0.0.1:1", "--sni", "a.example,*.b.example", "--alpn", "h2", "--peek-timeout", "1s"}); err != nil {
		t.Fatal(err)
	}
	one, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if r := one.Routes[0]; !slices.Equal(r.SNI, []string{"a.example", "*.b.example"}) || !slices.Equal(r.ALPN, []string{"h2"}) || r.PeekTimeout != time.Second {
		t.Fatalf("flags: %+v", r)
	}

	var out, errOut bytes.Buffer
	if code := runRelay([]string{"udp://127.0.0.1:9053", "udp://127.0.0.1:53", "--sni", "a.example", "--alpn", "h3", "--check-config"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "sni a.example") {
		t.Fatalf("--sni on a UDP route: exit %d, %q %q", code, out.String(), errOut.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", p, "--sni", "a.example"}, "--sni and --alpn are for a single route"},
		{[]string{"-c", write(t, `
routes:
  - {name: x, listen: udp://127.0.0.1:9443, sni: [a.example], target: udp://127.0.0.1:1, workers: 2}
  - {name: y, listen: udp://127.0.0.1:9443, target: udp://127.0.0.1:2}
`)}, `routes "x" and "y" share listen address udp://127.0.0.1:9443 but differ in workers`},
		{[]string{"-c", write(t, `
routes:
  - {name: x, listen: tcp://127.0.0.1:9443, sni: [a.example], target: tcp://127.0.0.1:1}
  - {name: y, listen: tcp://127.0.0.1:9443, sni: [A.example], target: tcp://127.0.0.1:2}
`)}, `routes "x" and "y" on tcp://127.0.0.1:9443 can match the same client`},
		{[]string{"-c", write(t, `
routes:
  - {name: x, listen: tcp://0.0.0.0:9443, target: tcp://127.0.0.1:1}
  - {name: y, listen: tcp://127.0.0.1:9443, target: tcp://127.0.0.1:2}
`)}, "overlap"},
	} {
		var out, errOut bytes.Buffer
		code := runRelay(append(tc.args, "--check-config"), &out, &errOut)
		msg := strings.TrimSpace(errOut.String())
		if code == 0 || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%q: exit %d, stderr %q; want one line with %q", tc.args, code, msg, tc.want)
		}
	}
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReloadUnderLoad: 20 SIGHUP reloads toggling workers 1 <-> 2 and
// adding and removing an SNI route on the same address, while three
// goroutines open short connections to it: none fails. A reload with a
// route that cannot bind is refused whole.
func TestReloadUnderLoad(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	listen := freeAddr(t)
	busy := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(i int, bad bool) {
		var b strings.Builder
		fmt.Fprintf(&b, "defaults: {workers: %d}\nroutes:\n  - {name: r, listen: tcp://%s, target: tcp://%s}\n", 1+i%2, listen, backend)
		if i%3 == 0 {
			fmt.Fprintf(&b, "  - {name: tls, listen: tcp://%s, sni: [a.example], target: tcp://%s}\n", listen, backend)
		}
		if bad {
			fmt.Fprintf(&b, "  - {name: bad, listen: tcp://%s, target: tcp://%s}\n", busy, backend)
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1, false)
	p := startProc(t, 1, "-c", conf)

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, err := net.DialTimeout("tcp", listen, 5*time.Second)
				if err == nil {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					buf := make([]byte, 4)
					if _, err = c.Write([]byte("ping")); err == nil {
						_, err = io.ReadFull(c, buf)
					}
					c.Close()
				}
				if err != nil {
					failed.Add(1)
					select {
					case errs <- err:
					default:
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	waitOK := func() {
		for n := ok.Load() + 50; ok.Load() < n && failed.Load() == 0; {
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 20 {
		waitOK()
		write(i+2, false)
		p.cmd.Process.Signal(syscall.SIGHUP)
		p.waitLog(t, "reloaded", i+1)
	}
	write(0, true)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reload failed; keeping the running config", 1)
	waitOK()
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d connections failed over 20 reloads; first: %v", n, n+ok.Load(), <-errs)
	}
	if l := p.logs("reload failed; keeping the running config"); !strings.Contains(fmt.Sprint(l[0]["err"]), `route "bad"`) {
		t.Errorf("refused reload: %v", l[0])
	}
	t.Logf("%d connections over 20 reloads, none failed", ok.Load())
}
