package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/sdnotify"
	"github.com/zeroio/zeroio/relay"
)

func runRelay(args []string, stdout, stderr io.Writer) int {
	exe, exeErr := startedFrom() // before anything may change the directory
	fail := func(err error) int {
		fmt.Fprintf(stderr, "zeroio relay: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	f := newRelayFlags()
	if err := f.parse(args); err != nil {
		return fail(err)
	}
	if f.help {
		relayHelp(stdout)
		return 0
	}
	cfg, err := f.config()
	if err != nil {
		return fail(err)
	}
	log, err := newLogger(stderr, &f.level, f.cur.logLevel, f.cur.logFormat)
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
	if err := inherit(srv, log); err != nil {
		return fail(err)
	}
	in, err := inheritUpgrade()
	if err != nil {
		return fail(err)
	}
	defer in.close()
	pid, err := preparePidFile(f.cur.pidFile)
	if err != nil {
		return fail(err)
	}
	defer pid.remove()
	aux, err := f.listenAux(in)
	if err != nil {
		return fail(err)
	}
	// Signals are caught before the routes listen: a SIGHUP sent as soon
	// as "listening" is logged would otherwise kill the process, or be
	// lost if it was started with SIGHUP ignored (nohup).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if upgradeSignal != nil {
		signal.Notify(sigs, upgradeSignal)
	}
	defer signal.Stop(sigs)
	if srv, err = in.start(srv, cfg); err != nil {
		for _, a := range aux {
			a.ln.Close()
		}
		return fail(err)
	}
	v, _ := buildVersion()
	log.Info("started", "version", v, "pid", os.Getpid())
	if err := pid.commit(); err != nil {
		log.Error("pid file not written", "err", err)
	}
	metrics, pprof, admin := serveAux(aux, srv, log)
	defer metrics.close()
	defer pprof.close()
	defer admin.close()
	notify(log, append(in.mainPID(), sdnotify.Ready, sdnotify.Status("serving"))...)
	in.serving()
	up := &upgrader{exe: exe, exeErr: exeErr, srv: srv, log: log, aux: aux}
	for {
		sig, ok := up.next(sigs)
		if !ok {
			// The new process serves, on the metrics and pprof
			// listeners too; what is left here is drained, without
			// a word to systemd, which follows the new process.
			metrics.close()
			pprof.close()
			admin.close()
			shutdown(srv, upgradeSignal, sigs, nil, f.cur.shutdownTimeout, log)
			return 0
		}
		if sig == syscall.SIGHUP {
			f.reloadNotified(srv, log)
			continue
		}
		notify(log, sdnotify.Stopping)
		shutdown(srv, sig, sigs, metrics, f.cur.shutdownTimeout, log)
		return 0
	}
}

// reloadNotified is reload, between RELOADING=1 and READY=1 to the
// service manager, whose status line then says how the reload went.
func (f *relayFlags) reloadNotified(srv *relay.Server, log *slog.Logger) {
	notify(log, sdnotify.Reloading, sdnotify.MonotonicUsec())
	status := "serving; reloaded"
	if f.file == "" {
		status = "serving; SIGHUP ignored: no config file"
	}
	if err := f.reload(srv, log); err != nil {
		status = "serving; reload failed, running config kept: " + err.Error()
	}
	notify(log, sdnotify.Ready, sdnotify.Status(status))
}

// notify tells the service manager, if one listens (NOTIFY_SOCKET), the
// relay's state (sd_notify(3)).
func notify(log *slog.Logger, lines ...string) {
	if err := sdnotify.Notify(lines...); err != nil {
		log.Warn("service manager notification failed", "err", err)
	}
}

// inherit gives srv the sockets of socket activation (listenFDs), if
// any, for the routes that listen on them.
func inherit(srv *relay.Server, log *slog.Logger) error {
	files, names, err := listenFDs()
	if err != nil || len(files) == 0 {
		return err
	}
	if err := srv.Inherit(files, names); err != nil {
		return err
	}
	log.Info("inherited sockets", "fds", len(files), "names", strings.Join(names, ":"))
	return nil
}

// config builds the relay's Config from the flags and, with -c, the
// file, and sets the settings in effect (resolve decides each).
func (f *relayFlags) config() (relay.Config, error) {
	sni, _ := f.spec["sni"].([]string)
	alpn, _ := f.spec["alpn"].([]string)
	switch {
	case f.file != "" && len(f.pos) > 0:
		return relay.Config{}, errors.New("give either LISTEN TARGET... or -c FILE, not both")
	case f.file != "" && (len(sni) > 0 || len(alpn) > 0):
		return relay.Config{}, errors.New("--sni and --alpn are for a single route given as LISTEN TARGET; in a config file, give each route its sni and alpn")
	case f.file != "":
		cfg, st, err := f.fromFile()
		f.cur = st
		return cfg, err
	case len(f.pos) >= 2:
		spec := f.spec.own()
		spec["listen"] = f.pos[0]
		var ts []targetSpec
		for _, t := range f.pos[1:] {
			ts = append(ts, targetSpec{URL: t})
		}
		spec["targets"] = ts
		r, err := spec.route()
		if err != nil {
			return relay.Config{}, err
		}
		f.cur = f.resolve(nil)
		return withSettings(relay.Config{Routes: []relay.Route{r}}, f.cur)
	}
	return relay.Config{}, errors.New("need LISTEN and TARGET addresses, or -c FILE (see zeroio relay --help)")
}

// fromFile reads the config file over the flags, at start and at every
// reload: the routes, over the route flags, and the settings that
// resolve decides.
func (f *relayFlags) fromFile() (relay.Config, settings, error) {
	cfg, fc, err := loadFile(f.file, f.spec)
	if err != nil {
		return cfg, f.flags, err
	}
	st := f.resolve(&fc)
	cfg, err = withSettings(cfg, st)
	return cfg, st, err
}

// withSettings sets the fields of cfg that the process's settings give.
func withSettings(cfg relay.Config, st settings) (relay.Config, error) {
	cfg.MaxConns, cfg.Engine = st.maxConns, st.engine
	cfg.DNSMinTTL, cfg.DNSMaxTTL = st.dnsMinTTL, st.dnsMaxTTL
	var err error
	if cfg.Resolver, err = parseResolver(st.resolver); err != nil {
		return cfg, err
	}
	cfg.ConnLog, err = connLogLevel(st.connLog)
	return cfg, err
}

// parseResolver reads --resolver: an IP address, with a port or not
// (53), or "" for the system's servers.
func parseResolver(s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(ip, 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("resolver %q: want an IP address and port, as 127.0.0.1:53 or [::1]:53", s)
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
	if f.cur.metrics != "" {
		if err := checkMetricsAddr(f.cur.metrics); err != nil {
			return fail(err)
		}
	}
	if f.pprofAddr != "" {
		if err := checkHostPort("pprof", "127.0.0.1:6060", f.pprofAddr); err != nil {
			return fail(err)
		}
	}
	if f.cur.admin != "" {
		if _, _, err := adminListenAddr(f.cur.admin, f.cur.adminRemote); err != nil {
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
		if err := checkTargets(cfg, stdout); err != nil {
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
				if s == upgradeSignal {
					log.Warn("upgrade refused: shutting down")
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
// configuration stays, and reload returns the error. The settings follow the file as at start, unless
// a flag gave them: the log level and the shutdown timeout at once; the
// engine, the log format and the metrics address take a restart.
func (f *relayFlags) reload(srv *relay.Server, log *slog.Logger) error {
	if f.file == "" {
		log.Warn("SIGHUP ignored: no config file (-c) to reload")
		return nil
	}
	cfg, st, err := f.fromFile()
	var lvl slog.Level
	if err == nil {
		lvl, err = parseLevel(st.logLevel)
	}
	if err == nil {
		err = checkFormat(st.logFormat)
	}
	if err == nil && st.metrics != "" {
		err = checkMetricsAddr(st.metrics)
	}
	if err == nil && st.admin != "" {
		_, _, err = adminListenAddr(st.admin, st.adminRemote)
	}
	if err == nil {
		// relay.Server.Update keeps the engine the relay started with.
		err = srv.Update(cfg)
	}
	if err != nil {
		log.Error("reload failed; keeping the running config", "err", err)
		return err
	}
	f.level.Set(lvl)
	// "" is the platform's default: naming it changes nothing.
	if running, file := effectiveEngine(f.started), effectiveEngine(cfg.Engine); file != running {
		log.Warn("the engine changes only at a restart; keeping the running one", "engine", running, "file", file)
	}
	if st.logFormat != f.cur.logFormat {
		log.Warn("the log format changes only at a restart; keeping the running one", "log_format", f.cur.logFormat, "file", st.logFormat)
	}
	if st.metrics != f.cur.metrics {
		log.Warn("the metrics address changes only at a restart; keeping the running one", "metrics", f.cur.metrics, "file", st.metrics)
	}
	if st.pidFile != f.cur.pidFile {
		log.Warn("the pid file changes only at a restart; keeping the running one", "pid_file", f.cur.pidFile, "file", st.pidFile)
	}
	if st.admin != f.cur.admin || st.adminRemote != f.cur.adminRemote {
		log.Warn("the admin address changes only at a restart; keeping the running one", "admin", f.cur.admin, "file", st.admin)
	}
	st.engine, st.logFormat, st.metrics, st.pidFile = f.cur.engine, f.cur.logFormat, f.cur.metrics, f.cur.pidFile
	st.admin, st.adminRemote = f.cur.admin, f.cur.adminRemote
	f.cur = st
	log.Info("reloaded", "file", f.file, "routes", len(cfg.Routes))
	return nil
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
