package relay

import (
	"strings"
	"testing"
)

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		in, network, address string
	}{
		{"tcp://127.0.0.1:8080", "tcp", "127.0.0.1:8080"},
		{"tcp://[::1]:8080", "tcp", "[::1]:8080"},
		{"tcp6://[fe80::1%eth0]:80", "tcp6", "[fe80::1%eth0]:80"},
		{"tcp://[fe80::1%25eth0]:80", "tcp", "[fe80::1%eth0]:80"}, // RFC 6874
		{"udp://[fe80::1%25lo]:53", "udp", "[fe80::1%lo]:53"},
		{"tcp://[fe80::1%2525x]:80", "tcp", "[fe80::1%25x]:80"}, // the zone "25x"
		{"tcp://localhost:0", "tcp", "localhost:0"},
		{"udp://0.0.0.0:53", "udp", "0.0.0.0:53"},
		{"udp4://10.0.0.1:5060", "udp4", "10.0.0.1:5060"},
		{"unix:///run/app.sock", "unix", "/run/app.sock"},
		{"unix://rel/app.sock", "unix", "rel/app.sock"},
		{"unix://@abstract", "unix", "@abstract"},
	} {
		a, err := ParseAddr(tc.in)
		if err != nil || a.Network != tc.network || a.Address != tc.address {
			t.Errorf("ParseAddr(%q) = %+v, %v", tc.in, a, err)
			continue
		}
		if back, err := ParseAddr(a.String()); err != nil || back != a {
			t.Errorf("%q: String %q does not parse back: %+v %v", tc.in, a.String(), back, err)
		}
	}
	if got := (Addr{Network: "tcp6", Address: "[fe80::1%eth0]:80"}).String(); got != "tcp6://[fe80::1%25eth0]:80" {
		t.Errorf("String of a zoned address = %q, want the RFC 6874 form", got)
	}
	for in, want := range map[string]string{
		"127.0.0.1:80":          "no scheme",
		"tcp://:8080":           "has no host",
		"udp://:53":             "has no host",
		"tcp://::1:80":          "brackets",
		"tcp://127.0.0.1":       "missing port",
		"tcp://127.0.0.1:http":  "not a number",
		"tcp://127.0.0.1:65536": "not a number",
		"tcp://127.0.0.1:080":   "not a number",
		"http://x:80":           "unknown scheme",
		"unix://":               "no socket path",
		"unix://@":              "no socket path",
		"tcp://u@127.0.0.1:80":  "bad host",
		"tcp://a/b:80":          "bad host",
		"tcp://[::1x]:80":       "bad host",
		"":                      "no scheme",
	} {
		_, err := ParseAddr(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAddr(%q) = %v, want error containing %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseAddr(%q): error spans lines: %q", in, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tcp := Addr{Network: "tcp", Address: "127.0.0.1:1"}
	udp := Addr{Network: "udp", Address: "127.0.0.1:1"}
	tcp2, udp2 := Addr{Network: "tcp", Address: "127.0.0.1:2"}, Addr{Network: "udp", Address: "127.0.0.1:2"}
	twoWays := "listen on one address written two ways"
	for name, tc := range map[string]struct {
		cfg  Config
		want string // in the error
	}{
		"empty":            {Config{}, "no routes"},
		"no target":        {Config{Routes: []Route{{Listen: tcp}}}, "no target address"},
		"udp to tcp":       {Config{Routes: []Route{{Listen: udp, Target: tcp}}}, "UDP relays only to UDP"},
		"proxy version":    {Config{Routes: []Route{{Listen: tcp, Target: tcp2, SendProxy: 3}}}, "PROXY protocol version 3"},
		"proxy v1 on udp":  {Config{Routes: []Route{{Listen: udp, Target: udp2, SendProxy: 1}}}, "send_proxy"},
		"duplicate name":   {Config{Routes: []Route{{Name: "a", Listen: tcp, Target: tcp2}, {Name: "a", Listen: udp, Target: udp2}}}, "name used twice"},
		"duplicate listen": {Config{Routes: []Route{{Name: "a", Listen: tcp, Target: tcp2}, {Name: "b", Listen: tcp, Target: tcp2}}}, "can match the same client"},
		"relay to itself":  {Config{Routes: []Route{{Name: "a", Listen: tcp, Target: tcp}}}, "relay to itself"},
		"workers on unix":  {Config{Routes: []Route{{Listen: Addr{Network: "unix", Address: "/tmp/zeroio-x.sock"}, Target: tcp, Workers: 2}}}, "workers > 1"},
		"unknown engine":   {Config{Routes: []Route{{Listen: tcp, Target: tcp2}}, Engine: "threads"}, `unknown engine "threads"`},
		"target port 0":    {Config{Routes: []Route{{Listen: tcp, Target: Addr{Network: "tcp", Address: "127.0.0.1:0"}}}}, "port 0 cannot be dialled"},
		// One socket address written two ways would bind twice.
		"tcp and tcp4": {Config{Routes: []Route{{Name: "a", Listen: tcp, Target: tcp2}, {Name: "b", Listen: Addr{Network: "tcp4", Address: "127.0.0.1:1"}, Target: tcp2}}}, twoWays},
		"::1 and 0::1": {Config{Routes: []Route{
			{Name: "a", Listen: Addr{Network: "tcp", Address: "[::1]:1"}, Target: tcp},
			{Name: "b", Listen: Addr{Network: "tcp6", Address: "[0::1]:1"}, Target: tcp}}}, twoWays},
		"udp mapped": {Config{Routes: []Route{{Name: "a", Listen: udp, Target: udp2}, {Name: "b", Listen: Addr{Network: "udp", Address: "[::ffff:127.0.0.1]:1"}, Target: udp2}}}, twoWays},
		"unix paths": {Config{Routes: []Route{
			{Name: "a", Listen: Addr{Network: "unix", Address: "/tmp/zeroio-x.sock"}, Target: tcp},
			{Name: "b", Listen: Addr{Network: "unix", Address: "/tmp/./zeroio-x.sock"}, Target: tcp}}}, twoWays},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, tc.cfg)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %s", name, err, tc.want)
		}
	}
}

// FuzzParseAddr: any string either fails with an error or gives an
// address whose String form parses back to the same address.
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{
		"tcp://127.0.0.1:8080", "tcp6://[fe80::1%25eth0]:80", "udp://[::]:53",
		"unix:///run/a.sock", "unix://@x", "tcp://:80", "tcp://a:b:c", "unix://",
		"tcp://[::1]", "udp4://host:0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			if a != (Addr{}) {
				t.Fatalf("ParseAddr(%q) = %+v with error %v", s, a, err)
			}
			return
		}
		back, err := ParseAddr(a.String())
		if err != nil || back != a {
			t.Fatalf("ParseAddr(%q) = %+v; its String %q parses to %+v, %v", s, a, a.String(), back, err)
		}
	})
}
