package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/zeroio/zeroio/relay"
)

const relayUsage = `Usage:
  zeroio relay LISTEN TARGET [TARGET...] [flags]
  zeroio relay -c relay.yaml [flags]

Relays every connection (or UDP datagram) arriving at LISTEN to one of
the TARGETs. Addresses are URLs: tcp://127.0.0.1:8080, tcp://[::1]:8080,
unix:///run/app.sock, unix://@abstract, udp://127.0.0.1:5353; a target
may be srv+tcp://_svc._tcp.example.com (every SRV record, from DNS).
`

const relayExamples = `
Examples:
  # spread over three replicas; one down at start is skipped
  zeroio relay tcp://0.0.0.0:8080 tcp://10.0.0.1:80 tcp://10.0.0.2:80 tcp://10.0.0.3:80
  # expose a Unix socket on a local TCP port
  zeroio relay tcp://127.0.0.1:8080 unix:///run/app.sock
  # front a service for the LAN only, sending the client's address in PROXY v2
  zeroio relay tcp://0.0.0.0:443 tcp://10.0.0.2:8443 --allow 192.168.0.0/16 --send-proxy v2
  # balance over every instance a Consul agent's DNS publishes, following it
  zeroio relay tcp://0.0.0.0:8080 srv+tcp://_web._tcp.service.consul --resolver 127.0.0.1:8600
  # forward DNS, sessions ending after 30 s of silence
  zeroio relay udp://0.0.0.0:53 udp://9.9.9.9:53 --session-timeout 30s
  # many routes from a file, with metrics; check an edited file before SIGHUP
  zeroio relay -c relay.yaml --metrics 127.0.0.1:9100
  zeroio relay -c relay.yaml --check-config
`

// mostUsed are the flags the short help shows, a line each.
var mostUsed = []struct{ name, arg, line string }{
	{"c", "FILE", "read routes from a YAML file; SIGHUP reloads it"},
	{"balance", "POLICY", "round-robin (the default), least-conn or client-hash"},
	{"dial-timeout", "DURATION", "time to connect to a target (default " + shortDuration(relay.DefaultDialTimeout) + "; never: none)"},
	{"idle-timeout", "DURATION", "close a stream idle this long (default " + shortDuration(relay.DefaultIdleTimeout) + "; never: none)"},
	{"health-interval", "DURATION", "check each target this often (default: a failed dial marks it down)"},
	{"max-conns", "N", "limit of concurrent streams over all routes"},
	{"allow", "CIDR", "admit only clients in CIDR (--deny refuses them)"},
	{"send-proxy", "VERSION", "send a PROXY protocol header, v1 or v2, to the target"},
	{"metrics", "HOST:PORT", "serve Prometheus metrics at /metrics, and /healthz"},
	{"conn-log", "LEVEL", "log a line per finished connection at LEVEL, or off"},
	{"engine", "ENGINE", "event (event loops; Linux, the default there) or goroutine"},
	{"check-config", "", "check the flags or file, list the routes and exit"},
}

// relayHelp is zeroio relay --help: the usage, examples and the most
// used flags.
func relayHelp(w io.Writer) {
	io.WriteString(w, relayUsage)
	io.WriteString(w, relayExamples)
	fmt.Fprintln(w, "\nMost used flags (route flags are the defaults for every route):")
	for _, m := range mostUsed {
		dash := "--"
		if len(m.name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(w, "  %-28s %s\n", strings.TrimSpace(dash+m.name+" "+m.arg), m.line)
	}
	fmt.Fprint(w, `
Signals: SIGINT or SIGTERM lets connections finish for --shutdown-timeout;
SIGHUP reloads -c FILE, all or nothing.

Every flag: zeroio help relay. The reference (every flag, YAML key,
default, metric, log line, signal and exit code): docs/relay.md.
`)
}

// relayHelpAll is zeroio help relay: the usage and every flag.
func relayHelpAll(w io.Writer) {
	io.WriteString(w, relayUsage)
	fmt.Fprintln(w, "\nFlags (route flags are the defaults for every route; docs/relay.md has\nthem all, with the config file's keys):")
	fs := newRelayFlags().fs
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// shortDuration writes d as a person would: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
