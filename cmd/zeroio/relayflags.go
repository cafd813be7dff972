package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/zeroio/zeroio/relay"
)

// relayFlags are zeroio relay's command line: the route flags (defaults
// for every route, in spec), the process's settings (flags), and the
// positional LISTEN TARGET... addresses.
type relayFlags struct {
	fs    *flag.FlagSet
	spec  routeSpec
	flags settings // as the flags give them, given or not
	cur   settings // in effect: flags over the file (resolve)

	file, pprofAddr         string
	started                 string // the engine the relay started with
	checkOnly, checkTargets bool
	help                    bool
	pos                     []string
	set                     map[string]bool // flags given explicitly
	level                   slog.LevelVar   // the log's level, which a reload may change
	noCheck                 bool            // deprecated, ignored
}

// settings are the process's settings that a flag and the config file's
// top level both give.
type settings struct {
	maxConns        int
	engine          string
	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string
	connLog         string
	metrics         string
	pidFile         string
	resolver        string
	dnsMinTTL       time.Duration
	dnsMaxTTL       time.Duration
	admin           string
	adminRemote     bool
}

// newRelayFlags defines the flags. A route flag left out leaves the
// field to relay.Route's default, which the help names.
func newRelayFlags() *relayFlags {
	f := &relayFlags{fs: flag.NewFlagSet("zeroio relay", flag.ContinueOnError), spec: routeSpec{}}
	fs, o := f.fs, &f.flags
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.file, "c", "", "read routes from this YAML `file` (also --config)")
	fs.StringVar(&f.file, "config", "", "same as -c")
	defineRouteFlags(fs, f.spec)
	fs.IntVar(&o.maxConns, "max-conns", 0, "limit of concurrent streams over all routes (0: none)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json (to stderr)")
	fs.StringVar(&o.connLog, "conn-log", "debug", "`level` of the line logged for each finished connection (client, route, target, bytes, duration, why it ended): debug, info, warn or off")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://`host:port`/metrics, and /healthz (200, or 503 while shutting down)")
	fs.StringVar(&o.pidFile, "pid-file", "", "write the process's pid to this `file` (rewritten by the new process of an upgrade, removed at exit)")
	fs.StringVar(&o.resolver, "resolver", "", "ask this DNS server (`host:port`, an IP address; port 53 if left out) for the names of srv+tcp, srv+udp and resolve all targets, instead of the servers of /etc/resolv.conf")
	fs.DurationVar(&o.dnsMinTTL, "dns-min-ttl", relay.DefaultDNSMinTTL, "keep a discovered target's DNS answer at least this long, whatever its TTL (a `duration`)")
	fs.DurationVar(&o.dnsMaxTTL, "dns-max-ttl", relay.DefaultDNSMaxTTL, "keep a discovered target's DNS answer at most this long, whatever its TTL (a `duration`)")
	fs.StringVar(&o.admin, "admin", "", "serve the admin API (JSON over HTTP: routes, targets, connections; drain, disable, enable, weight, close) at `addr`: a loopback host:port, e.g. "+defaultAdmin+", or unix:///path; see zeroio ctl")
	fs.BoolVar(&o.adminRemote, "admin-allow-remote", false, "let --admin listen on an address other than loopback (the admin API has no authentication)")
	fs.StringVar(&o.engine, "engine", "", "the `engine` that moves stream routes' bytes: event (event loops, no goroutine per connection; Linux) or goroutine (goroutines per connection, every platform); default the platform's best, event on Linux")
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve Go's runtime profiles (net/http/pprof) at http://`host:port`/debug/pprof/; off by default, keep it on loopback")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGINT/SIGTERM, how long connections may finish")
	fs.BoolVar(&f.checkOnly, "check-config", false, "check the flags or config file without dialling anything, list the routes and exit without listening")
	fs.BoolVar(&f.checkTargets, "check-targets", false, "check the config, then dial every target once and exit: non-zero if any does not answer (for deploy scripts)")
	fs.BoolVar(&f.noCheck, "no-check", false, "deprecated and ignored: the relay no longer dials its targets before it starts")
	fs.BoolVar(&f.help, "help", false, "show a short help (zeroio help relay lists every flag)")
	fs.BoolVar(&f.help, "h", false, "show a short help (zeroio help relay lists every flag)")
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
	if f.flags.shutdownTimeout < 0 {
		return fmt.Errorf("--shutdown-timeout %v is negative (0 closes connections at once)", f.flags.shutdownTimeout)
	}
	f.cur = f.flags
	return nil
}

// resolve decides flag against file, at start and at every reload
// alike: a flag given on the command line wins; else the file's value,
// if it sets one; else the flag's default. fc is nil without a file.
func (f *relayFlags) resolve(fc *fileConfig) settings {
	s := f.flags
	if fc == nil {
		return s
	}
	pick(&s.maxConns, f.set["max-conns"], int(fc.MaxConns))
	pick(&s.engine, f.set["engine"], fc.Engine)
	pick(&s.shutdownTimeout, f.set["shutdown-timeout"], max(fc.ShutdownTimeout, 0))
	pick(&s.logLevel, f.set["log-level"], fc.LogLevel)
	pick(&s.logFormat, f.set["log-format"], fc.LogFormat)
	pick(&s.connLog, f.set["conn-log"], fc.ConnLog)
	pick(&s.metrics, f.set["metrics"], fc.Metrics)
	pick(&s.pidFile, f.set["pid-file"], fc.PidFile)
	pick(&s.resolver, f.set["resolver"], fc.Resolver)
	pick(&s.dnsMinTTL, f.set["dns-min-ttl"], fc.DNSMinTTL)
	pick(&s.dnsMaxTTL, f.set["dns-max-ttl"], fc.DNSMaxTTL)
	pick(&s.admin, f.set["admin"], fc.Admin)
	pick(&s.adminRemote, f.set["admin-allow-remote"], fc.AdminAllowRemote)
	return s
}

// pick sets *dst to the file's value unless the flag was given or the
// file leaves the setting out (its zero value).
func pick[T comparable](dst *T, flagGiven bool, file T) {
	var zero T
	if !flagGiven && file != zero {
		*dst = file
	}
}

// duration is a time.Duration that may also be written "never"
// (relay.Never), as a flag or in YAML.
type duration time.Duration

func (d duration) String() string {
	switch time.Duration(d) {
	case 0:
		return ""
	case relay.Never:
		return "never"
	}
	return time.Duration(d).String()
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
