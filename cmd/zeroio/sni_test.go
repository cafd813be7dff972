package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// TestConfigSNI: sni, alpn, peek_timeout and listen_overlap reach
// relay.Route; --sni makes a single route; ambiguous routes, sni on UDP
// and --sni with a file are one-line errors.
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

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", p, "--sni", "a.example"}, "--sni and --alpn are for a single route"},
		{[]string{"udp://127.0.0.1:9053", "udp://127.0.0.1:53", "--sni", "a.example"}, "sni and alpn are for stream routes"},
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
