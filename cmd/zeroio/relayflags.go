package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/zeroio/zeroio/relay"
)

// relayFlags are zeroio relay's command line: the route flags (defaults
// for every route, in spec), the process's options, and the positional
// LISTEN TARGET... addresses.
type relayFlags struct {
	fs   *flag.FlagSet
	spec routeSpec
	opt  options

	file, pprofAddr, engine    string
	started                    string // the engine the relay started with
	global                     int
	checkOnly, checkTargets    bool
	help                       bool
	allow, deny, trusted, pos  listFlag
	sni, alpn                  listFlag
	set                        map[string]bool // flags given explicitly
	level                      slog.LevelVar   // the log's level, which a reload may change
	noCheck                    bool            // deprecated, ignored
	healthRise, healthFall     int
	healthInterval, healthTime duration
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// newRelayFlags defines the flags. A route flag's zero value leaves the
// field to relay.Route's default, which the help names.
func newRelayFlags() *relayFlags {
	f := &relayFlags{fs: flag.NewFlagSet("zeroio relay", flag.ContinueOnError)}
	fs, s := f.fs, &f.spec
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.file, "c", "", "read routes from this YAML `file` (also --config)")
	fs.StringVar(&f.file, "config", "", "same as -c")
	fs.Var(&f.sni, "sni", "with LISTEN TARGET: take only TLS clients whose ClientHello names this server (`name` or *.wildcard; repeat or comma-separate); others are closed")
	fs.Var(&f.alpn, "alpn", "with LISTEN TARGET: take only TLS clients offering this ALPN `protocol` (repeat or comma-separate)")
	fs.Var(&s.PeekTimeout, "peek-timeout", fmt.Sprintf("time allowed for a client's TLS ClientHello on a route chosen by SNI or ALPN (`duration`, default %v)", relay.DefaultPeekTimeout))
	fs.IntVar((*int)(&s.Workers), "workers", 1, "`N` sockets per TCP or UDP route in one SO_REUSEPORT group, sharing accept or reads (Linux)")
	fs.StringVar(&s.Balance, "balance", "", "the `policy` that spreads new clients over a route's targets: round-robin (weighted; the default), least-conn or client-hash")
	fs.Var(&s.DialTimeout, "dial-timeout", fmt.Sprintf("time allowed to connect to a target, over all the targets a client tries: a `duration`, or never (default %v)", relay.DefaultDialTimeout))
	fs.Var(&s.IdleTimeout, "idle-timeout", fmt.Sprintf("close a stream after this long with no byte moving either way: a `duration`, or never (default %v)", relay.DefaultIdleTimeout))
	fs.Var(&f.healthInterval, "health-interval", "connect to each target this often to check it (a `duration`; by default no active checks: a failed dial marks a target down)")
	fs.Var(&f.healthTime, "health-timeout", "time allowed for a health check's connect (a `duration`; default the smaller of the interval and --dial-timeout)")
	fs.IntVar(&f.healthRise, "health-rise", 0, "`N` passed checks in a row bring a target back up (default 2)")
	fs.IntVar(&f.healthFall, "health-fall", 0, "`N` failed checks in a row mark a target down (default 3)")
	fs.IntVar(&f.global, "max-conns", 0, "limit of concurrent streams over all routes (0: none)")
	fs.IntVar((*int)(&s.MaxConns), "max-conns-route", 0, "limit of concurrent streams per route (0: none)")
	fs.IntVar((*int)(&s.MaxConnsPerClient), "max-conns-per-client", 0, "limit of concurrent streams per client IP (0: none)")
	fs.Var(&f.allow, "allow", "admit only clients in this `CIDR` (repeat or comma-separate)")
	fs.Var(&f.deny, "deny", "refuse clients in this `CIDR` (repeat or comma-separate; deny wins)")
	fs.StringVar(&s.SendProxy, "send-proxy", "", "send a PROXY protocol header of this `version` (v1, v2) to the target")
	fs.BoolVar(&s.AcceptProxy, "accept-proxy", false, "require a PROXY protocol header (v1 or v2) from each client")
	fs.Var(&f.trusted, "trusted-proxy", "with --accept-proxy, admit only peers in this `CIDR` (an error without --accept-proxy)")
	fs.Var(&s.ProxyHeaderTimeout, "proxy-header-timeout", fmt.Sprintf("time allowed for a client's PROXY header (`duration`, default %v)", relay.DefaultProxyHeaderTimeout))
	fs.Var(&s.KeepAlive, "keepalive", "turn TCP keep-alive on for both sockets of each stream, probing after this long idle (a `duration`); off by default, as in HAProxy: no system call is spent on it")
	fs.BoolVar(&s.Nagle, "nagle", false, "enable Nagle's algorithm (by default TCP_NODELAY is set)")
	fs.Var(&s.SessionTimeout, "session-timeout", fmt.Sprintf("end a UDP session after this long without a datagram (`duration`, default %v)", relay.DefaultSessionTimeout))
	fs.IntVar((*int)(&s.MaxSessions), "max-sessions", 0, fmt.Sprintf("limit of concurrent UDP sessions per route (default %d)", relay.DefaultMaxSessions))
	fs.StringVar(&s.UnixMode, "unix-mode", "", "permission bits of a Unix listen socket's file, in `octal` (0660: owner and group may connect)")
	fs.StringVar(&s.UnixUser, "unix-user", "", "owner of a Unix listen socket's file: a `user` name or uid (needs privilege)")
	fs.StringVar(&s.UnixGroup, "unix-group", "", "group of a Unix listen socket's file: a `group` name or gid")
	fs.IntVar((*int)(&s.UDPBuffer), "udp-buffer", 0, fmt.Sprintf("receive and send buffer of a UDP route's sockets (listening and per session), in bytes (default %d)", relay.DefaultUDPBuffer))
	fs.StringVar(&f.opt.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.opt.logFormat, "log-format", "text", "text or json (to stderr)")
	fs.StringVar(&f.opt.connLog, "conn-log", "debug", "`level` of the line logged for each finished connection (client, route, target, bytes, duration, why it ended): debug, info, warn or off")
	fs.StringVar(&f.opt.metrics, "metrics", "", "serve Prometheus metrics at http://`host:port`/metrics, and /healthz (200, or 503 while shutting down)")
	fs.StringVar(&f.engine, "engine", "", "the `engine` that moves stream routes' bytes: event (event loops, no goroutine per connection; Linux) or goroutine (goroutines per connection, every platform); default the platform's best, event on Linux")
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve Go's runtime profiles (net/http/pprof) at http://`host:port`/debug/pprof/; off by default, keep it on loopback")
	fs.DurationVar(&f.opt.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGINT/SIGTERM, how long connections may finish")
	fs.BoolVar(&f.checkOnly, "check-config", false, "check the flags or config file without dialling anything, list the routes and exit without listening")
	fs.BoolVar(&f.checkTargets, "check-targets", false, "check the config, then dial every target once and exit: non-zero if any does not answer (for deploy scripts)")
	fs.BoolVar(&f.noCheck, "no-check", false, "deprecated and ignored: the relay no longer dials its targets before it starts")
	fs.BoolVar(&f.help, "help", false, "show this help")
	fs.BoolVar(&f.help, "h", false, "show this help")
	return f
}

const defaultShutdownTimeout = 30 * time.Second

// parse reads args; flags may come before, between or after the
// addresses.
func (f *relayFlags) parse(args []string) error {
	for {
		if err := f.fs.Parse(args); err != nil {
			return fmt.Errorf("%v (see zeroio relay --help)", err)
		}
		if f.fs.NArg() == 0 {
			break
		}
		f.pos = append(f.pos, f.fs.Arg(0))
		args = f.fs.Args()[1:]
	}
	f.set = map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if f.opt.shutdownTimeout < 0 {
		return fmt.Errorf("--shutdown-timeout %v is negative (0 closes connections at once)", f.opt.shutdownTimeout)
	}
	f.spec.Allow, f.spec.Deny, f.spec.TrustedProxies = f.allow, f.deny, f.trusted
	f.spec.SNI, f.spec.ALPN = f.sni, f.alpn
	if f.healthInterval != 0 || f.healthTime != 0 || f.healthRise != 0 || f.healthFall != 0 {
		f.spec.HealthCheck = &healthSpec{f.healthInterval, f.healthTime, integer(f.healthRise), integer(f.healthFall)}
	}
	return nil
}

// duration is a time.Duration that may also be written "never"
// (relay.Never), as a flag or in YAML.
type duration time.Duration

func (d *duration) String() string {
	switch time.Duration(*d) {
	case 0:
		return ""
	case relay.Never:
		return "never"
	}
	return time.Duration(*d).String()
}

func (d *duration) Set(s string) error {
	if s == "never" {
		*d = duration(relay.Never)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (1.5s, 10m, 1h) or never", s)
	}
	*d = duration(v)
	return nil
}

func (d *duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// UnmarshalYAML reads a duration from the config file. yaml returns a
// TextUnmarshaler's error bare, without the line, so that "10" is not a
// duration could not be found in a file of many routes; an error here
// names its line, and lets yaml report the file's other errors too.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	err := fmt.Errorf("want a duration (1.5s, 10m, 1h) or never")
	if n.Kind == yaml.ScalarNode {
		err = d.Set(n.Value)
	}
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}
