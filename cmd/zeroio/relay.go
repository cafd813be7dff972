package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/relay"
)

const relayHelp = `Usage:
  zeroio relay LISTEN TARGET [flags]
  zeroio relay -c relay.yaml [flags]

Relays every connection (or UDP datagram) arriving at LISTEN to TARGET,
moving bytes with splice(2) on Linux. Addresses are URLs:

  tcp://127.0.0.1:8080     tcp://[::1]:8080     tcp://0.0.0.0:8080 (every network)
  unix:///run/app.sock     unix://@abstract     udp://127.0.0.1:5353
  (tcp4, tcp6, udp4 and udp6 pin the family; an IPv6 zone is written
  [fe80::1%25eth0], as in a URL, or [fe80::1%eth0])

LISTEN must name its host: tcp://:8080 is refused rather than silently
opening the port to every network. Streams pair freely (TCP to Unix and
back); UDP relays to UDP. Ports are numeric.

Examples:
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
file's defaults, then the flags):

  max_conns: 10000            # all routes together
  shutdown_timeout: 30s
  log_level: info             # debug, info, warn, error
  log_format: text            # text or json
  metrics: 127.0.0.1:9100
  defaults:
    idle_timeout: 1h
  routes:
    - name: web
      listen: tcp://0.0.0.0:443
      target: tcp://10.0.0.2:8443
      workers: 2
      dial_timeout: 5s
      max_conns: 5000
      max_conns_per_client: 50
      allow: [10.0.0.0/8, 192.168.0.0/16]
      deny: [10.6.6.0/24]
      send_proxy: v2          # v1 or v2
      keepalive: 30s          # negative disables
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
SIGHUP reloads the config file: new routes start, removed routes stop
listening, established connections are never touched, and on Linux those
still waiting in a stopped listener's accept queue are relayed, not reset;
a bad file is logged and the running config kept.

Before serving, each target is resolved and each stream target dialled
once; a failure is an error unless --no-check.

Flags (route flags are the defaults for every route):
`

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

func runRelay(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "zeroio relay: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	fs := flag.NewFlagSet("zeroio relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		spec                 routeSpec
		opt                  options
		file, pprofAddr      string
		global               int
		noCheck, checkOnly   bool
		allow, deny, trusted listFlag
	)
	fs.StringVar(&file, "c", "", "read routes from this YAML `file` (also --config)")
	fs.StringVar(&file, "config", "", "same as -c")
	fs.IntVar(&spec.Workers, "workers", 1, "`N` sockets per TCP or UDP route in one SO_REUSEPORT group, sharing accept or reads (Linux)")
	fs.DurationVar(&spec.DialTimeout, "dial-timeout", relay.DefaultDialTimeout, "time allowed to connect to the target")
	fs.DurationVar(&spec.IdleTimeout, "idle-timeout", 0, "close a stream after this long with no byte moving either way (0: never)")
	fs.IntVar(&global, "max-conns", 0, "limit of concurrent streams over all routes (0: none)")
	fs.IntVar(&spec.MaxConns, "max-conns-route", 0, "limit of concurrent streams per route (0: none)")
	fs.IntVar(&spec.MaxConnsPerClient, "max-conns-per-client", 0, "limit of concurrent streams per client IP (0: none)")
	fs.Var(&allow, "allow", "admit only clients in this `CIDR` (repeat or comma-separate)")
	fs.Var(&deny, "deny", "refuse clients in this `CIDR` (repeat or comma-separate; deny wins)")
	fs.StringVar(&spec.SendProxy, "send-proxy", "", "send a PROXY protocol header of this `version` (v1, v2) to the target")
	fs.BoolVar(&spec.AcceptProxy, "accept-proxy", false, "require a PROXY protocol header (v1 or v2) from each client")
	fs.Var(&trusted, "trusted-proxy", "with --accept-proxy, admit only peers in this `CIDR`")
	fs.DurationVar(&spec.ProxyHeaderTimeout, "proxy-header-timeout", relay.DefaultProxyHeaderTimeout, "time allowed for a client's PROXY header")
	fs.DurationVar(&spec.KeepAlive, "keepalive", 0, "TCP keep-alive period (0: Go's default of 15s, negative: off)")
	fs.BoolVar(&spec.Nagle, "nagle", false, "enable Nagle's algorithm (by default TCP_NODELAY is set)")
	fs.DurationVar(&spec.SessionTimeout, "session-timeout", relay.DefaultSessionTimeout, "end a UDP session after this long without a datagram")
	fs.IntVar(&spec.MaxSessions, "max-sessions", relay.DefaultMaxSessions, "limit of concurrent UDP sessions per route (0: the default)")
	fs.StringVar(&spec.UnixMode, "unix-mode", "", "permission bits of a Unix listen socket's file, in `octal` (0660: owner and group may connect)")
	fs.StringVar(&spec.UnixUser, "unix-user", "", "owner of a Unix listen socket's file: a `user` name or uid (needs privilege)")
	fs.StringVar(&spec.UnixGroup, "unix-group", "", "group of a Unix listen socket's file: a `group` name or gid")
	fs.IntVar(&spec.UDPBuffer, "udp-buffer", relay.DefaultUDPBuffer, "receive and send buffer of a UDP route's sockets (listening and per session), in bytes (0: the default)")
	fs.StringVar(&opt.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&opt.logFormat, "log-format", "text", "text or json (to stderr)")
	fs.StringVar(&opt.metrics, "metrics", "", "serve Prometheus metrics at http://`host:port`/metrics, and /healthz (200, or 503 while shutting down)")
	fs.StringVar(&pprofAddr, "pprof", "", "serve Go's runtime profiles (net/http/pprof) at http://`host:port`/debug/pprof/; off by default, keep it on loopback")
	fs.DurationVar(&opt.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long connections may finish")
	fs.BoolVar(&noCheck, "no-check", false, "start even if a target does not resolve or answer")
	fs.BoolVar(&checkOnly, "check-config", false, "check the flags or config file (and each target, unless --no-check), list the routes and exit without listening")
	help := fs.Bool("help", false, "show this help")
	fs.BoolVar(help, "h", false, "show this help")

	// Flags may come before, between or after LISTEN and TARGET.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return fail(fmt.Errorf("%v (see zeroio relay --help)", err))
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if opt.shutdownTimeout < 0 {
		return fail(fmt.Errorf("--shutdown-timeout %v is negative (0 closes connections at once)", opt.shutdownTimeout))
	}
	if *help {
		io.WriteString(stdout, relayHelp)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	spec.Allow, spec.Deny, spec.TrustedProxies = allow, deny, trusted
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var cfg relay.Config
	switch {
	case file != "" && len(pos) > 0:
		return fail(errors.New("give either LISTEN TARGET or -c FILE, not both"))
	case file != "":
		c, fc, err := loadFile(file, spec)
		if err != nil {
			return fail(err)
		}
		cfg = c
		// Flags given explicitly win over the file's global settings.
		cfg.MaxConns = maxConns(set["max-conns"], global, fc)
		if !set["shutdown-timeout"] && fc.ShutdownTimeout > 0 {
			opt.shutdownTimeout = fc.ShutdownTimeout
		}
		if !set["log-level"] && fc.LogLevel != "" {
			opt.logLevel = fc.LogLevel
		}
		if !set["log-format"] && fc.LogFormat != "" {
			opt.logFormat = fc.LogFormat
		}
		if !set["metrics"] && fc.Metrics != "" {
			opt.metrics = fc.Metrics
		}
	case len(pos) == 2:
		spec.Listen, spec.Target = pos[0], pos[1]
		spec.ownUnix = spec.setsUnix()
		r, err := spec.route()
		if err != nil {
			return fail(err)
		}
		cfg.Routes = []relay.Route{r}
		cfg.MaxConns = global
	case len(pos) < 2:
		return fail(errors.New("need LISTEN and TARGET addresses, or -c FILE (see zeroio relay --help)"))
	default:
		return fail(fmt.Errorf("too many arguments: %q (see zeroio relay --help)", pos[2:]))
	}

	log, err := newLogger(stderr, opt.logLevel, opt.logFormat)
	if err != nil {
		return fail(err)
	}
	cfg.Logger = log
	srv, err := relay.New(cfg)
	if err != nil {
		return fail(err)
	}
	if !noCheck {
		if err := checkTargets(cfg.Routes); err != nil {
			return fail(fmt.Errorf("%v (--no-check starts anyway)", err))
		}
	}
	if checkOnly {
		if opt.metrics != "" {
			if err := checkMetricsAddr(opt.metrics); err != nil {
				return fail(err)
			}
		}
		if pprofAddr != "" {
			if err := checkHostPort("pprof", "127.0.0.1:6060", pprofAddr); err != nil {
				return fail(err)
			}
		}
		for _, r := range cfg.Routes {
			name := ""
			if r.Name != "" {
				name = " " + r.Name
			}
			fmt.Fprintf(stdout, "route%s: %s -> %s\n", name, r.Listen, r.Target)
		}
		plural := "s"
		if len(cfg.Routes) == 1 {
			plural = ""
		}
		fmt.Fprintf(stdout, "config ok: %d route%s\n", len(cfg.Routes), plural)
		return 0
	}
	var metrics *metricsServer
	if opt.metrics != "" {
		if metrics, err = startMetrics(opt.metrics, srv, log); err != nil {
			return fail(err)
		}
		defer metrics.close()
	}
	if pprofAddr != "" {
		p, err := startPprof(pprofAddr, log)
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
			reload(srv, file, spec, set["max-conns"], global, log)
			continue
		}
		log.Info("shutting down", "signal", sig.String(), "timeout", opt.shutdownTimeout)
		if metrics != nil {
			metrics.draining.Store(true)
		}
		ctx, cancel := context.WithTimeout(context.Background(), opt.shutdownTimeout)
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
		if err != nil {
			log.Warn("connections closed at the shutdown deadline", "err", err)
		}
		log.Info("stopped")
		return 0
	}
	return 0
}

// reload re-reads the config file on SIGHUP; on any error the running
// configuration stays.
func reload(srv *relay.Server, file string, base routeSpec, flagSet bool, flagMax int, log *slog.Logger) {
	if file == "" {
		log.Warn("SIGHUP ignored: no config file (-c) to reload")
		return
	}
	cfg, fc, err := loadFile(file, base)
	if err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return
	}
	cfg.MaxConns = maxConns(flagSet, flagMax, fc)
	if err := srv.Update(cfg); err != nil {
		log.Error("reload incomplete", "err", err)
		return
	}
	log.Info("reloaded", "file", file, "routes", len(cfg.Routes))
}

// maxConns is the global connection limit: --max-conns if it was given,
// else the file's max_conns, at start and at every reload alike.
func maxConns(flagSet bool, flagMax int, fc fileConfig) int {
	if flagSet {
		return flagMax
	}
	return fc.MaxConns
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// checkTargets resolves every target host and dials every stream target
// once, so a typo or a dead backend is reported at start.
func checkTargets(routes []relay.Route) error {
	var errs []error
	for _, r := range routes {
		t := r.Target
		timeout := r.DialTimeout
		if timeout <= 0 {
			timeout = relay.DefaultDialTimeout
		}
		name := r.Name
		if name == "" {
			name = r.Listen.String()
		}
		if t.Datagram() {
			host, _, _ := net.SplitHostPort(t.Address)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("route %q: target %s does not resolve: %v", name, t, err))
			}
			continue
		}
		c, err := net.DialTimeout(t.Network, t.Address, timeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("route %q: target %s unreachable: %v", name, t, err))
			continue
		}
		c.Close()
	}
	return errors.Join(errs...)
}
