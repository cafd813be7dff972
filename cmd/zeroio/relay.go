package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/relay"
)

const relayHelp = `Usage:
  zeroio relay LISTEN TARGET [TARGET...] [flags]
  zeroio relay -c relay.yaml [flags]

Relays every connection (or UDP datagram) arriving at LISTEN to one of
the TARGETs, moving bytes with splice(2) on Linux. Addresses are URLs:

  tcp://127.0.0.1:8080     tcp://[::1]:8080     tcp://0.0.0.0:8080 (every network)
  unix:///run/app.sock     unix://@abstract     udp://127.0.0.1:5353
  (tcp4, tcp6, udp4 and udp6 pin the family; an IPv6 zone is written
  [fe80::1%25eth0], as in a URL, or [fe80::1%eth0])

LISTEN must name its host: tcp://:8080 is refused rather than silently
opening the port to every network. Streams pair freely (TCP to Unix and
back); UDP relays to UDP. Ports are numeric.

Several targets: new clients are spread by --balance: round-robin
(weighted, interleaved as nginx's smooth round-robin; the default),
least-conn (fewest active connections per unit of weight), or client-hash
(rendezvous hashing of the client IP: one client keeps its target, and
adding or removing one of n targets moves only about 1/n of clients). A
dial that fails or times out marks the target down (for 1s, doubling to
30s while it keeps failing) and the client is given the next target
within --dial-timeout, so no client is refused while a target is alive.
With --health-interval the relay also connects to each target that often
(HAProxy's check inter rise fall): --health-fall failures in a row mark it
down, --health-rise successes bring it back. The relay starts whatever
its targets' state; --check-targets dials each once for deploy scripts.

Several TLS services on one port: routes with the same listen address
are told apart by the ClientHello, read without being consumed (the
target gets every byte; TLS is not terminated). sni: lists server names
(exact, or *.example.com for any name under it); alpn: optionally
protocols (h2, http/1.1). The most specific route wins: exact name, then
the longest wildcard, then routes without sni; a route with alpn over one
without. The route with neither is the default for clients that send no
ClientHello, no name, or one nothing matches; without it they are closed.
A client has --peek-timeout (default 5s) to send its hello, which may be
16 KiB at most. Two routes that could take the same client are refused.

Timeouts: --dial-timeout (default 5s) and --idle-timeout (default 1h) are
Envoy's defaults (HAProxy has none and waits forever; nginx 60s and 10m);
"never" turns either off. Negative durations are refused; 0 is the
default.

Examples:
  # spread over three replicas; one down at start is skipped
  zeroio relay tcp://0.0.0.0:8080 tcp://10.0.0.1:80 tcp://10.0.0.2:80 tcp://10.0.0.3:80
  # the same client to the same replica, checked every 2s, a line per connection
  zeroio relay tcp://0.0.0.0:8080 tcp://10.0.0.1:80 tcp://10.0.0.2:80 --balance client-hash --health-interval 2s --conn-log info
  # expose a Unix socket on a local TCP port
  zeroio relay tcp://127.0.0.1:8080 unix:///run/app.sock
  # and the other way: a TCP service on a socket file its group may use
  zeroio relay unix:///run/app/api.sock tcp://127.0.0.1:8080 --unix-mode 0660 --unix-group www-data
  # front a service for the LAN only, sending the client's address in PROXY v2
  zeroio relay tcp://0.0.0.0:443 tcp://10.0.0.2:8443 --allow 192.168.0.0/16 --send-proxy v2
  # forward DNS, sessions ending after 30 s of silence
  zeroio relay udp://0.0.0.0:53 udp://9.9.9.9:53 --session-timeout 30s
  # many routes, with metrics for Prometheus
  zeroio relay -c relay.yaml --metrics 127.0.0.1:9100
  # check an edited config file before sending SIGHUP
  zeroio relay -c relay.yaml --check-config
  # profile a live relay: go tool pprof http://127.0.0.1:6060/debug/pprof/profile
  zeroio relay -c relay.yaml --pprof 127.0.0.1:6060

Config file (YAML; unknown keys are errors; route fields not set take the
file's defaults, then the flags, where they apply to the route: not health
checks or PROXY headers to UDP, nor workers to a Unix socket):

  max_conns: 10000            # all routes together
  engine: event               # event or goroutine (--engine); a restart changes it
  shutdown_timeout: 30s
  log_level: info             # debug, info, warn, error
  log_format: text            # text or json
  conn_log: info              # a line per finished connection: debug, info, warn, off
  metrics: 127.0.0.1:9100
  defaults:
    idle_timeout: 10m         # or never
  routes:
    - name: web
      listen: tcp://0.0.0.0:443
      targets:                # or target: URL for one
        - tcp://10.0.0.2:8443
        - url: tcp://10.0.0.3:8443
          weight: 3           # 0 to 256, default 1; 0 takes no new clients
      balance: least-conn     # round-robin (default), least-conn, client-hash
      health_check:           # optional; without it a failed dial marks down
        interval: 2s
        timeout: 1s           # default: the smaller of interval and dial_timeout
        rise: 2
        fall: 3
      workers: 2
      dial_timeout: 3s        # over all the targets one client tries
      max_conns: 5000
      max_conns_per_client: 50
      allow: [10.0.0.0/8, 192.168.0.0/16]
      deny: [10.6.6.0/24]
      send_proxy: v2          # v1 or v2
      keepalive: 30s          # TCP keep-alive; off by default
    # three routes on one port, chosen by the ClientHello (peek_timeout,
    # workers and accept_proxy, if set, must be the same on all three)
    - {name: a, listen: tcp://0.0.0.0:9443, sni: [a.example.com, "*.a.example.com"], target: tcp://10.0.0.1:443}
    - {name: b-h2, listen: tcp://0.0.0.0:9443, sni: [b.example.com], alpn: [h2], target: tcp://10.0.0.2:443}
    - {name: other, listen: tcp://0.0.0.0:9443, target: tcp://10.0.0.9:443}
    - name: from-lb
      listen: tcp://127.0.0.1:8443
      target: unix:///run/app.sock
      accept_proxy: true
      trusted_proxies: [127.0.0.1]
    - name: api-socket
      listen: unix:///run/zeroio/api.sock
      target: tcp://10.0.0.3:8080
      unix_mode: 0660         # octal; the file's group may connect too
      unix_group: www-data    # name or gid (unix_user too, with privilege)
    - name: dns
      listen: udp://0.0.0.0:53
      target: udp://9.9.9.9:53
      session_timeout: 60s
      max_sessions: 10000
      udp_buffer: 4194304     # bytes, buffers of the listening and session sockets
      workers: 2              # readers on SO_REUSEPORT sockets (Linux)

Signals: SIGINT or SIGTERM stops accepting and lets connections finish for
--shutdown-timeout, then closes them (a second signal closes at once);
meanwhile /healthz on the --metrics address answers 503.
SIGHUP reloads the config file, all or nothing: if the file is bad or any
route cannot start (an address in use), the error is logged and the
running config kept whole.
Otherwise new routes start, removed routes stop listening, and
established connections are never touched. A stream reload loses no
client: an address that stays keeps its sockets (a change of workers adds
sockets, or on Linux steers clients off the surplus ones before they
close), a route that moves listens at its new address before the old one
closes, and clients waiting in a closed socket's accept queue are
relayed, not reset. A wildcard and a specific listen address on one port
(0.0.0.0:443 and 127.0.0.1:443) are refused unless a route sets
listen_overlap: true. A reload may add,
remove and reweight targets: connections to a removed target finish
undisturbed, and a kept target keeps its health and counters.

Flags (route flags are the defaults for every route):
`

func runRelay(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "zeroio relay: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	f := newRelayFlags()
	if err := f.parse(args); err != nil {
		return fail(err)
	}
	if f.help {
		io.WriteString(stdout, relayHelp)
		f.fs.SetOutput(stdout)
		f.fs.PrintDefaults()
		return 0
	}
	cfg, err := f.config()
	if err != nil {
		return fail(err)
	}
	log, err := newLogger(stderr, &f.level, f.opt.logLevel, f.opt.logFormat)
	if err != nil {
		return fail(err)
	}
	cfg.Logger = log
	f.started = cfg.Engine
	srv, err := relay.New(cfg)
	if err != nil {
		return fail(err)
	}
	if f.checkOnly || f.checkTargets {
		return f.check(cfg, stdout, fail)
	}
	var metrics *metricsServer
	if f.opt.metrics != "" {
		if metrics, err = startMetrics(f.opt.metrics, srv, log); err != nil {
			return fail(err)
		}
		defer metrics.close()
	}
	if f.pprofAddr != "" {
		p, err := startPprof(f.pprofAddr, log)
		if err != nil {
			return fail(err)
		}
		defer p.close()
	}
	// Signals are caught before the routes listen: a SIGHUP sent as soon
	// as "listening" is logged would otherwise kill the process, or be
	// lost if it was started with SIGHUP ignored (nohup).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := srv.Start(); err != nil {
		return fail(err)
	}
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			f.reload(srv, log)
			continue
		}
		shutdown(srv, sig, sigs, metrics, f.opt.shutdownTimeout, log)
		return 0
	}
	return 0
}

// config builds the relay's Config from the flags and, with -c, the file:
// flags given explicitly win over the file's global settings.
func (f *relayFlags) config() (relay.Config, error) {
	var cfg relay.Config
	switch {
	case f.file != "" && len(f.pos) > 0:
		return cfg, errors.New("give either LISTEN TARGET... or -c FILE, not both")
	case f.file != "" && (len(f.sni) > 0 || len(f.alpn) > 0):
		return cfg, errors.New("--sni and --alpn are for a single route given as LISTEN TARGET; in a config file, give each route its sni and alpn")
	case f.file != "":
		c, fc, err := loadFile(f.file, f.spec)
		if err != nil {
			return cfg, err
		}
		cfg = c
		cfg.MaxConns = maxConns(f.set["max-conns"], f.global, fc)
		cfg.Engine = engine(f.set["engine"], f.engine, fc)
		for _, o := range []struct {
			flag string
			file string
			dst  *string
		}{{"log-level", fc.LogLevel, &f.opt.logLevel}, {"log-format", fc.LogFormat, &f.opt.logFormat}, {"metrics", fc.Metrics, &f.opt.metrics}, {"conn-log", fc.ConnLog, &f.opt.connLog}} {
			if !f.set[o.flag] && o.file != "" {
				*o.dst = o.file
			}
		}
		if !f.set["shutdown-timeout"] && fc.ShutdownTimeout > 0 {
			f.opt.shutdownTimeout = fc.ShutdownTimeout
		}
	case len(f.pos) >= 2:
		spec := f.spec
		spec.Listen = f.pos[0]
		for _, t := range f.pos[1:] {
			spec.Targets = append(spec.Targets, targetSpec{URL: t})
		}
		spec.ownUnix = spec.setsUnix()
		r, err := spec.route()
		if err != nil {
			return cfg, err
		}
		cfg.Routes = []relay.Route{r}
		cfg.MaxConns = f.global
		cfg.Engine = f.engine
	default:
		return cfg, errors.New("need LISTEN and TARGET addresses, or -c FILE (see zeroio relay --help)")
	}
	lvl, err := connLogLevel(f.opt.connLog)
	if err != nil {
		return cfg, err
	}
	cfg.ConnLog = lvl
	return cfg, nil
}

// connLogLevel reads --conn-log.
func connLogLevel(s string) (slog.Leveler, error) {
	if s == "off" {
		return relay.ConnLogOff, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return nil, fmt.Errorf("conn-log %q: want debug, info, warn or off", s)
	}
	return l, nil
}

// check is --check-config and --check-targets: the config is valid (New
// accepted it); list the routes, and with --check-targets dial each.
func (f *relayFlags) check(cfg relay.Config, stdout io.Writer, fail func(error) int) int {
	if f.opt.metrics != "" {
		if err := checkMetricsAddr(f.opt.metrics); err != nil {
			return fail(err)
		}
	}
	if f.pprofAddr != "" {
		if err := checkHostPort("pprof", "127.0.0.1:6060", f.pprofAddr); err != nil {
			return fail(err)
		}
	}
	for _, r := range cfg.Routes {
		name := ""
		if r.Name != "" {
			name = " " + r.Name
		}
		var ts []string
		for _, t := range r.Targets {
			ts = append(ts, t.Addr.String())
		}
		var by string // how the route is chosen on a shared address
		if len(r.SNI) > 0 {
			by += " sni " + strings.Join(r.SNI, ",")
		}
		if len(r.ALPN) > 0 {
			by += " alpn " + strings.Join(r.ALPN, ",")
		}
		fmt.Fprintf(stdout, "route%s: %s%s -> %s\n", name, r.Listen, by, strings.Join(ts, " "))
	}
	plural := "s"
	if len(cfg.Routes) == 1 {
		plural = ""
	}
	fmt.Fprintf(stdout, "config ok: %d route%s\n", len(cfg.Routes), plural)
	if f.checkTargets {
		if err := checkTargets(cfg.Routes, stdout); err != nil {
			return fail(err)
		}
	}
	return 0
}

// shutdown stops srv on sig: it lets connections finish for timeout, or
// until a second signal, then closes them.
func shutdown(srv *relay.Server, sig os.Signal, sigs chan os.Signal, metrics *metricsServer, timeout time.Duration, log *slog.Logger) {
	log.Info("shutting down", "signal", sig.String(), "timeout", timeout)
	if metrics != nil {
		metrics.draining.Store(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGHUP {
					log.Warn("SIGHUP ignored: shutting down")
					continue
				}
				log.Info("second signal: closing now", "signal", s.String())
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	err := srv.Shutdown(ctx)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("connections closed at the shutdown deadline", "err", err)
	case err != nil:
		log.Warn("connections closed at the second signal", "err", err)
	}
	log.Info("stopped")
}

// reload re-reads the config file on SIGHUP; on any error the running
// configuration stays.
func (f *relayFlags) reload(srv *relay.Server, log *slog.Logger) {
	if f.file == "" {
		log.Warn("SIGHUP ignored: no config file (-c) to reload")
		return
	}
	cfg, fc, err := loadFile(f.file, f.spec)
	if err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return
	}
	cfg.MaxConns = maxConns(f.set["max-conns"], f.global, fc)
	// conn_log follows the file unless --conn-log was given, and goes
	// back to the flag's default when the file no longer sets it.
	if cfg.ConnLog, err = connLogLevel(f.fileOpt("conn-log", fc.ConnLog)); err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return
	}
	// relay.Server.Update keeps the engine the relay started with; a new
	// one in the file takes a restart.
	cfg.Engine = engine(f.set["engine"], f.engine, fc)
	// The process's settings follow the file too, unless a flag gave
	// them, as at start: the log level and the shutdown timeout at once;
	// the log format and the metrics address take a restart.
	level, format, metrics := f.fileOpt("log-level", fc.LogLevel), f.fileOpt("log-format", fc.LogFormat), f.fileOpt("metrics", fc.Metrics)
	lvl, err := parseLevel(level)
	if err == nil {
		err = checkFormat(format)
	}
	if err == nil && metrics != "" {
		err = checkMetricsAddr(metrics)
	}
	if err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return
	}
	timeout := f.opt.shutdownTimeout
	if !f.set["shutdown-timeout"] {
		timeout = defaultShutdownTimeout
		if fc.ShutdownTimeout > 0 {
			timeout = fc.ShutdownTimeout
		}
	}
	if err := srv.Update(cfg); err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return
	}
	f.level.Set(lvl)
	f.opt.logLevel, f.opt.shutdownTimeout = level, timeout
	// "" is the platform's default: naming it changes nothing.
	if running, file := effectiveEngine(f.started), effectiveEngine(cfg.Engine); file != running {
		log.Warn("the engine changes only at a restart; keeping the running one", "engine", running, "file", file)
	}
	if format != f.opt.logFormat {
		log.Warn("the log format changes only at a restart; keeping the running one", "log_format", f.opt.logFormat, "file", format)
	}
	if metrics != f.opt.metrics {
		log.Warn("the metrics address changes only at a restart; keeping the running one", "metrics", f.opt.metrics, "file", metrics)
	}
	log.Info("reloaded", "file", f.file, "routes", len(cfg.Routes))
}

// fileOpt is the value of the option set by flag name at a reload: the
// flag's if it was given, else the file's (file) if set, else the flag's
// default, as config reads them at start.
func (f *relayFlags) fileOpt(name, file string) string {
	fl := f.fs.Lookup(name)
	switch {
	case f.set[name]:
		return fl.Value.String()
	case file != "":
		return file
	}
	return fl.DefValue
}

// maxConns is the global connection limit: --max-conns if it was given,
// else the file's max_conns, at start and at every reload alike.
func maxConns(flagSet bool, flagMax int, fc fileConfig) int {
	if flagSet {
		return flagMax
	}
	return int(fc.MaxConns)
}

// engine is the engine's name: --engine if it was given, else the file's
// engine ("" is the platform's default), at start and at every reload.
func engine(flagSet bool, flagEngine string, fc fileConfig) string {
	if flagSet {
		return flagEngine
	}
	return fc.Engine
}

// effectiveEngine is the engine name the relay runs for name: name
// itself, or for "" the platform's default (event on Linux, where the
// relay package has it; goroutine elsewhere).
func effectiveEngine(name string) string {
	if name != "" {
		return name
	}
	if runtime.GOOS == "linux" {
		return relay.EngineEvent
	}
	return relay.EngineGoroutine
}

// newLogger returns the relay's logger, at level, which it sets in lv for
// a reload to change.
func newLogger(w io.Writer, lv *slog.LevelVar, level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	if err := checkFormat(format); err != nil {
		return nil, err
	}
	lv.Set(l)
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return slog.New(slog.NewTextHandler(w, o)), nil
}

func parseLevel(level string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return l, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	return l, nil
}

func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("log format %q: want text or json", format)
	}
	return nil
}
