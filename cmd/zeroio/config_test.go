package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// TestConfigUnixMode: a unix_mode in defaults reaches only the routes that
// listen on a Unix socket path; one written on another route is an error.
func TestConfigUnixMode(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "r.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, _, err := loadFile(write(`
defaults:
  unix_mode: 0640
routes:
  - {name: inherit, listen: unix:///run/a.sock, target: tcp://127.0.0.1:1}
  - {name: own, listen: unix:///run/b.sock, target: tcp://127.0.0.1:1, unix_mode: "0o666", unix_group: "0"}
  - {name: tcp, listen: tcp://127.0.0.1:0, target: tcp://127.0.0.1:1}
  - {name: abstract, listen: unix://@zeroio, target: tcp://127.0.0.1:1}
`), routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{"inherit": 0o640, "own": 0o666, "tcp": 0, "abstract": 0}
	for _, r := range cfg.Routes {
		if r.UnixMode != want[r.Name] {
			t.Errorf("route %s: UnixMode %#o, want %#o", r.Name, r.UnixMode, want[r.Name])
		}
		if wantGroup := map[bool]string{true: "0"}[r.Name == "own"]; r.UnixGroup != wantGroup {
			t.Errorf("route %s: UnixGroup %q, want %q", r.Name, r.UnixGroup, wantGroup)
		}
	}

	// From the command line's defaults too.
	cfg, _, err = loadFile(write(`
routes:
  - {name: a, listen: unix:///run/a.sock, target: tcp://127.0.0.1:1}
  - {name: b, listen: tcp://127.0.0.1:0, target: tcp://127.0.0.1:1}
`), routeSpec{"unix_mode": "600"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes[0].UnixMode != 0o600 || cfg.Routes[1].UnixMode != 0 {
		t.Errorf("--unix-mode as a default: %#o, %#o", cfg.Routes[0].UnixMode, cfg.Routes[1].UnixMode)
	}

	for body, msg := range map[string]string{
		"routes:\n  - {listen: unix:///run/a.sock, target: tcp://127.0.0.1:1, unix_mode: 888}\n": "not a file mode",
		"routes:\n  - {listen: unix:///run/a.sock, target: tcp://127.0.0.1:1, unix_mode: 0}\n":   "not a file mode",
	} {
		if _, _, err := loadFile(write(body), routeSpec{}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err = %v, want %q", body, err, msg)
		}
	}
}

// FuzzLoadFile feeds config files of any shape to the loader: it must
// never panic, an error must name the file on each of its lines (one per
// bad route), and relay.New must take whatever the loader accepts without
// panicking.
func FuzzLoadFile(f *testing.F) {
	for _, seed := range []string{
		"routes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}\n",
		"max_conns: 10\ndefaults:\n  idle_timeout: 1h\nroutes:\n  - name: a\n    listen: udp://[::1]:53\n    target: udp://9.9.9.9:53\n    session_timeout: 60s\n",
		"routes:\n  - {listen: unix:///tmp/x.sock, target: tcp://127.0.0.1:2, unix_mode: 0660}\n",
		"routes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2, allow: [10.0.0.0/8], send_proxy: v2}\n",
		"routes: []\n",
		"routes:\n  - listen: tcp://:1\n    target: 5\n",
		"defaults: [1, 2]\nroutes: {}\n",
		"{{{{",
		"routes:\n  - &a {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}\n  - *a\n",
		"",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "relay.yaml")
	f.Fuzz(func(t *testing.T, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadFile(path, routeSpec{})
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, path+": ") {
					t.Fatalf("error line without the file's name: %q", line)
				}
			}
			return
		}
		// Checks across routes (duplicate names or listen addresses) are
		// relay.New's: it may refuse the config, but must not panic.
		_, _ = relay.New(cfg)
	})
}

// TestEngineSetting: the engine comes from --engine, else the file's
// engine key, else is left to the relay ("" is the platform's default).
func TestEngineSetting(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "relay.yaml")
	os.WriteFile(conf, []byte("engine: goroutine\nroutes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://127.0.0.1:1}\n"), 0o600)
	plain := filepath.Join(dir, "plain.yaml")
	os.WriteFile(plain, []byte("routes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://127.0.0.1:1}\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tcp://127.0.0.1:0", "tcp://127.0.0.1:1"}, ""},
		{[]string{"--engine", "goroutine", "tcp://127.0.0.1:0", "tcp://127.0.0.1:1"}, "goroutine"},
		{[]string{"-c", conf}, "goroutine"},
		{[]string{"-c", conf, "--engine", "event"}, "event"},
		{[]string{"-c", plain}, ""},
	} {
		f := newRelayFlags()
		if err := f.parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		cfg, err := f.config()
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.Engine != tc.want {
			t.Errorf("%q: engine %q, want %q", tc.args, cfg.Engine, tc.want)
		}
	}
}

// TestConfigHealthCheckPerRoute: a route's own health_check is its own,
// over the defaults' fields (the file's, then the flags'): it changes
// neither the defaults of the routes after it nor the flags that the
// next reload reads the file over.
func TestConfigHealthCheckPerRoute(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(`
defaults:
  health_check: {interval: 2s}
routes:
  - {name: a, listen: tcp://127.0.0.1:1000, target: tcp://127.0.0.1:2000, health_check: {interval: 1s, rise: 5}}
  - {name: b, listen: tcp://127.0.0.1:1001, target: tcp://127.0.0.1:2000}
  - {name: c, listen: tcp://127.0.0.1:1002, target: tcp://127.0.0.1:2000, health_check: {fall: 7}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := routeSpec{"health_check": healthSpec{Timeout: duration(time.Second)}}
	for range 2 { // a reload reads the file over the same flags
		cfg, _, err := loadFile(p, flags)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]relay.HealthCheck{
			"a": {Interval: time.Second, Timeout: time.Second, Rise: 5},
			"b": {Interval: 2 * time.Second, Timeout: time.Second},
			"c": {Interval: 2 * time.Second, Timeout: time.Second, Fall: 7},
		}
		for _, r := range cfg.Routes {
			if r.HealthCheck != want[r.Name] {
				t.Errorf("route %s: health check %+v, want %+v", r.Name, r.HealthCheck, want[r.Name])
			}
		}
		if flags["health_check"] != (healthSpec{Timeout: duration(time.Second)}) {
			t.Fatalf("the flags' health check became %+v", flags["health_check"])
		}
	}
}

// TestConfigAnchorsAndLines: YAML anchors set in one part of the file
// and aliased (or merged with <<) in another resolve, and an error
// inside a route names the line of the file it is on, not a line of the
// route re-encoded on its own.
func TestConfigAnchorsAndLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
defaults:
  targets: [tcp://127.0.0.1:9]
routes:
  - &a
    name: a
    listen: tcp://127.0.0.1:1
    target: tcp://127.0.0.1:2
    idle_timeout: 1m
  - <<: *a
    name: b
    listen: tcp://127.0.0.1:3
  - name: c
    listen: tcp://127.0.0.1:4
    targets: &ts [tcp://127.0.0.1:5, {url: tcp://127.0.0.1:6, weight: 3}]
  - {name: d, listen: tcp://127.0.0.1:7, targets: *ts}
`)
	cfg, _, err := loadFile(p, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 4 {
		t.Fatalf("%d routes, want 4", len(cfg.Routes))
	}
	b, d := cfg.Routes[1], cfg.Routes[3]
	if b.Name != "b" || b.Listen.String() != "tcp://127.0.0.1:3" || len(b.Targets) != 1 || b.Targets[0].Addr.String() != "tcp://127.0.0.1:2" || b.IdleTimeout != time.Minute {
		t.Errorf("route merged from a: %+v", b)
	}
	if len(d.Targets) != 2 || d.Targets[1].Weight != 3 {
		t.Errorf("route with aliased targets: %+v", d.Targets)
	}

	write(`max_conns: 10
defaults:
  idle_timeout: 1m
routes:
  - name: a
    listen: tcp://127.0.0.1:1
    target: tcp://127.0.0.1:2
  - name: b
    listen: tcp://127.0.0.1:3
    target: tcp://127.0.0.1:2
    idle_timout: 5s
  - name: c
    listen: tcp://127.0.0.1:4
    targets:
      - url: tcp://127.0.0.1:2
        weight: x
      - {url: tcp://127.0.0.1:2, wieght: 2}
`)
	_, _, err = loadFile(p, routeSpec{})
	want := []string{"line 11: unknown key idle_timout", "line 16: cannot unmarshal", "line 17: unknown key wieght"}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v: want it to contain %q", err, w)
		}
	}
	if err != nil && strings.Contains(err.Error(), "main.") {
		t.Errorf("error %v names a Go type", err)
	}
}

// TestConfigDefaultsFitTheRoute: defaults (from the file or the flags)
// that cannot apply to a route's kind of listen address, health checks
// and the PROXY protocol on UDP, workers on a Unix socket, do not reach
// it, while the same settings written in the route itself are refused.
func TestConfigDefaultsFitTheRoute(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	routes := `routes:
  - {name: t, listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}
  - {name: u, listen: udp://127.0.0.1:3, target: udp://127.0.0.1:4}
  - {name: x, listen: unix:///run/x.sock, target: tcp://127.0.0.1:2}
`
	check := func(cfg relay.Config) {
		t.Helper()
		if _, err := relay.New(cfg); err != nil {
			t.Fatal(err)
		}
		tr, u, x := cfg.Routes[0], cfg.Routes[1], cfg.Routes[2]
		if tr.HealthCheck.Interval != 2*time.Second || tr.SendProxy != 2 || tr.Workers != 2 ||
			tr.IdleTimeout != 5*time.Second || tr.MaxConns != 7 || tr.MaxSessions != 0 {
			t.Errorf("TCP route lost its defaults: %+v", tr)
		}
		if u.HealthCheck.Interval != 0 || u.SendProxy != 0 || u.Workers != 2 ||
			u.IdleTimeout != 0 || u.MaxConns != 0 || u.MaxSessions != 9 {
			t.Errorf("UDP route: %+v", u)
		}
		if x.Workers > 1 || x.SendProxy != 2 || x.HealthCheck.Interval != 2*time.Second {
			t.Errorf("Unix route: %+v", x)
		}
	}
	write("defaults:\n  health_check: {interval: 2s}\n  send_proxy: v2\n  workers: 2\n  idle_timeout: 5s\n  max_conns: 7\n  max_sessions: 9\n" + routes)
	cfg, _, err := loadFile(p, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	check(cfg)
	write(routes)
	cfg, _, err = loadFile(p, routeSpec{"health_check": healthSpec{Interval: duration(2 * time.Second)}, "send_proxy": "v2", "workers": integer(2),
		"idle_timeout": duration(5 * time.Second), "max_conns": integer(7), "max_sessions": integer(9)})
	if err != nil {
		t.Fatal(err)
	}
	check(cfg)

	// The route's own settings are still refused.
	for _, route := range []string{
		"{listen: udp://127.0.0.1:3, target: udp://127.0.0.1:4, health_check: {interval: 2s}}",
		"{listen: udp://127.0.0.1:3, target: udp://127.0.0.1:4, send_proxy: v1}",
		"{listen: unix:///run/x.sock, target: tcp://127.0.0.1:2, workers: 2}",
		"{listen: udp://127.0.0.1:3, target: udp://127.0.0.1:4, max_conns: 5}",
		"{listen: tcp://127.0.0.1:3, target: tcp://127.0.0.1:4, session_timeout: 5s}",
	} {
		write("routes:\n  - " + route + "\n")
		cfg, _, err := loadFile(p, routeSpec{})
		if err == nil {
			_, err = relay.New(cfg)
		}
		if err == nil {
			t.Errorf("%s: accepted", route)
		}
	}
}

// TestConfigIntegers: a number with a fraction where the file wants a
// whole number is an error, not truncated (weight: 0.5 became 0, a
// target that takes no clients; max_conns_per_client: 0.9 no limit).
func TestConfigIntegers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	for _, c := range []struct{ body, want string }{
		{"routes:\n  - {listen: tcp://127.0.0.1:1, targets: [{url: tcp://127.0.0.1:2, weight: 0.5}, tcp://127.0.0.1:3]}\n", "line 2: 0.5 is not a whole number"},
		{"routes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2, max_conns_per_client: 0.9}\n", "0.9 is not a whole number"},
		{"routes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2, workers: 2.5}\n", "2.5 is not a whole number"},
		{"routes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2, health_check: {interval: 1s, rise: 1.9}}\n", "1.9 is not a whole number"},
		{"max_conns: 5e9\nroutes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}\n", "line 1: 5e9 is not written as an integer (5000000000)"},
		{"max_conns: 1e3\nroutes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}\n", "line 1: 1e3 is not written as an integer (1000)"},
		{"max_conns: 99999999999999999999\nroutes:\n  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}\n", "99999999999999999999 is out of range"},
		{"defaults: {max_sessions: 10.0}\nroutes:\n  - {listen: udp://127.0.0.1:1, target: udp://127.0.0.1:2}\n", "10.0 is not written as an integer (10)"},
	} {
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := loadFile(p, routeSpec{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.body, err, c.want)
		}
	}
	// Whole numbers still read, also with _ between digits.
	if err := os.WriteFile(p, []byte("max_conns: 1_000\nroutes:\n  - {listen: tcp://127.0.0.1:1, targets: [{url: tcp://127.0.0.1:2, weight: 3}], workers: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := loadFile(p, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConns != 1000 || cfg.Routes[0].Targets[0].Weight != 3 || cfg.Routes[0].Workers != 2 {
		t.Errorf("max_conns %d, weight %d, workers %d", cfg.MaxConns, cfg.Routes[0].Targets[0].Weight, cfg.Routes[0].Workers)
	}
}

// TestConfigDurationLines: a bad duration is reported at its line, with
// the file's other errors, not bare.
func TestConfigDurationLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(`routes:
  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}
  - {listen: tcp://127.0.0.1:3, target: tcp://127.0.0.1:2, idle_timeout: 10}
  - {listen: tcp://127.0.0.1:4, target: tcp://127.0.0.1:2, dial_timeout: {a: 1}, idle_timeout: ~}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadFile(p, routeSpec{})
	for _, want := range []string{`line 3: "10" is not a duration`, "line 4: want a duration"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
}

// TestConfigUnnamedSharedListen: two routes without names on one listen
// address are refused with the lines and what to add, not as a name
// (their address) "used twice" that the file never wrote.
func TestConfigUnnamedSharedListen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(`routes:
  - {listen: tcp://127.0.0.1:1, sni: [a.example], target: tcp://127.0.0.1:2}
  - {listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:3}
  - {listen: tcp://127.0.0.1:4, target: tcp://127.0.0.1:3}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadFile(p, routeSpec{})
	want := "line 3: the routes at lines 2 and 3 both listen on tcp://127.0.0.1:1: give each a name"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestConfigTypeErrors: a value of the wrong kind is named in the file's
// terms (a list, a mapping of route settings), not by the Go type it
// failed to fill, and every such error in the file is reported.
func TestConfigTypeErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	for body, wants := range map[string][]string{
		"[]\n":                          {"line 1: cannot unmarshal !!seq: want a mapping of settings and routes"},
		"routes: {a: 1}\n":              {"want a list of routes"},
		"routes: [tcp://127.0.0.1:1]\n": {"want a mapping of route settings"},
		"shutdown_timeout: 30\nroutes: [{listen: tcp://127.0.0.1:1, target: tcp://127.0.0.1:2}]\n": {"want a duration"},
		"routes:\n  - listen: tcp://127.0.0.1:1\n    target: tcp://127.0.0.1:2\n    health_check: yes\n    nagle: x\n    allow: 10.0.0.0/8\n    workers: two\n": {
			"line 4: cannot unmarshal !!str `yes`: want a mapping (interval, timeout, rise, fall); ",
			"line 5: cannot unmarshal !!str `x`: want true or false; ",
			"line 6: cannot unmarshal !!str `10.0.0.0/8`: want a list; ",
			"line 7: cannot unmarshal !!str `two`: want an integer",
		},
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := loadFile(p, routeSpec{})
		if err == nil {
			t.Errorf("%q: accepted", body)
			continue
		}
		msg := oneLine(err)
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: error %q, want it to contain %q", body, msg, w)
			}
		}
		if strings.Contains(msg, "main.") || strings.Contains(msg, "yaml.Node") {
			t.Errorf("%q: error %q names a Go type", body, msg)
		}
	}
}

// TestConfigQUICLB: a UDP route's quic_lb gives the layout of its
// targets' connection IDs and each target its server_id (hex), in either
// order; a route's quic_lb is read over the defaults' (as health_check
// is), and a quic_lb in the defaults reaches UDP routes only.
func TestConfigQUICLB(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(`
defaults:
  quic_lb: {config_id: 1, server_id_len: 2, nonce_len: 8}
routes:
  - name: q
    listen: udp://127.0.0.1:1000
    targets:
      - {url: udp://127.0.0.1:2000, server_id: "0a01"}
      - {url: udp://127.0.0.1:2001, server_id: "0A02", weight: 2}
  - name: own
    quic_lb: {server_id_len: 1, nonce_len: 4}
    listen: udp://127.0.0.1:1001
    targets: [{url: udp://127.0.0.1:2002, server_id: "ff"}]
  - {name: s, listen: tcp://127.0.0.1:1002, target: tcp://127.0.0.1:2000}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := loadFile(p, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]relay.Route{}
	for _, r := range cfg.Routes {
		byName[r.Name] = r
	}
	q := byName["q"].QUICLB
	if q == nil || q.ConfigID != 1 || q.ServerIDLen != 2 || q.NonceLen != 8 || len(q.Servers) != 2 ||
		string(q.Servers[1].ID) != "\x0a\x02" || q.Servers[1].Target.Address != "127.0.0.1:2001" {
		t.Fatalf("route q: %+v", q)
	}
	if o := byName["own"].QUICLB; o == nil || o.ServerIDLen != 1 || o.ConfigID != 1 || string(o.Servers[0].ID) != "\xff" {
		t.Fatalf("route own: %+v", o)
	}
	if byName["s"].QUICLB != nil {
		t.Fatal("the defaults' quic_lb reached a stream route")
	}
	if _, err := relay.New(cfg); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(p, []byte(`
routes:
  - {name: q, listen: udp://127.0.0.1:1000, targets: [{url: udp://127.0.0.1:2000, server_id: "zz"}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadFile(p, routeSpec{}); err == nil || !strings.Contains(err.Error(), "server_id") {
		t.Fatalf("server_id not hex: %v", err)
	}
}
