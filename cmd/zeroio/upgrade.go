package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zeroio/zeroio/cmd/zeroio/internal/sdnotify"
	"github.com/zeroio/zeroio/relay"
)

// A live upgrade (SIGUSR2): the running relay starts the binary at the
// path it was started from, with its arguments and environment; the new
// process loads its configuration as any start does, then takes the
// running relay's listeners and connections over a Unix socket pair
// (relay.Server.HandOver, relay.TakeOver) instead of binding, and the old
// process exits. The new process finds what the old one passed it in its
// environment:
const (
	envUpgradeFD        = "ZEROIO_UPGRADE_FD"        // its end of the hand-over socket pair
	envUpgradeReady     = "ZEROIO_UPGRADE_READY_FD"  // a pipe it writes a byte to once it serves
	envUpgradeListeners = "ZEROIO_UPGRADE_LISTENERS" // name:fd,... of the metrics and pprof listeners
)

const (
	// upgradeTimeout bounds the new process's start: one that has not
	// loaded its configuration by then (a hang, a binary that is not
	// zeroio) is killed, and the old one keeps everything. The hand-over
	// itself bounds each of its steps (relay.Server.HandOver).
	upgradeTimeout = 30 * time.Second
	// readyTimeout bounds the old process's wait, after the hand-over,
	// for the new one to have written its pid file and told systemd its
	// pid.
	readyTimeout = 3 * time.Second
	// exitWait is how long a new process whose hand-over failed has to
	// exit on its own before it is killed.
	exitWait = 2 * time.Second
)

// startedFrom returns the absolute path of the file this process was
// started from, as os.Args[0] names it (directly or through $PATH). An
// upgrade runs the file at that path, replaced by then; /proc/self/exe
// would name the file running now, perhaps deleted.
func startedFrom() (string, error) {
	p := os.Args[0]
	if !strings.ContainsRune(p, filepath.Separator) {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("the binary the relay was started from: %w", err)
		}
		p = lp
	}
	return filepath.Abs(p)
}

// upgradeEnv returns env without the variables that describe descriptors
// of this process: an earlier upgrade's, and systemd's socket activation
// (sd_listen_fds(3)), whose sockets the new process receives by the
// hand-over, not as inherited descriptors.
func upgradeEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case envUpgradeFD, envUpgradeReady, envUpgradeListeners, "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// auxListener is a listener of the process's own servers (metrics,
// pprof), which an upgrade passes to the new process as it starts, so
// that their addresses never stop answering.
type auxListener struct {
	name string
	ln   net.Listener
}

// newProcess is the process an upgrade started, seen from the old one.
type newProcess struct {
	cmd     *exec.Cmd
	conn    *net.UnixConn // the hand-over socket
	ready   *os.File      // the read end of the new process's ready pipe
	exited  chan struct{} // closed when it has exited
	waitErr error         // how it exited, once exited is closed
	done    chan error    // the hand-over's outcome
}

// handOver hands srv over to p once p has loaded its configuration, and
// once p has taken it over, waits (at most readyTimeout) for p to say it
// serves. Until p is ready to take over, srv goes on unpaused.
func (p *newProcess) handOver(srv *relay.Server) error {
	defer p.conn.Close()
	defer p.ready.Close()
	if err := p.await(upgradeTimeout); err != nil {
		return p.failed(err)
	}
	if err := srv.HandOver(p.conn); err != nil {
		return p.failed(err)
	}
	p.await(readyTimeout)
	return nil
}

// await reads the next byte p writes on its ready pipe: the first when
// it has loaded its configuration and takes over, the second when it
// serves (its pid file written, systemd told its pid).
func (p *newProcess) await(d time.Duration) error {
	p.ready.SetReadDeadline(time.Now().Add(d))
	_, err := p.ready.Read(make([]byte, 1))
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("the new process ended before taking over")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the new process did not take over within %v", d)
	}
	return err
}

// failed adds to the error of a failed upgrade how p ended: on its own
// (it does after a failed take-over), or killed after exitWait.
func (p *newProcess) failed(err error) error {
	select {
	case <-p.exited:
	case <-time.After(exitWait):
		p.cmd.Process.Kill()
		<-p.exited
	}
	if p.waitErr != nil {
		return fmt.Errorf("%w (new process: %v)", err, p.waitErr)
	}
	return err
}

// upgrader runs the old process's side of upgrades, between the signals
// the relay's loop acts on.
type upgrader struct {
	exe      string // startedFrom
	exeErr   error
	srv      *relay.Server
	log      *slog.Logger
	aux      []auxListener
	inflight *newProcess // the upgrade in progress, or nil
	deferred []os.Signal // signals that came during it
}

// next returns the next signal for the relay's loop to act on. It acts
// itself on the upgrade signal and on the upgrade's end, and holds back
// other signals while an upgrade is in flight: they are passed to the
// new process if it took over, or returned after a failed one. ok is
// false once an upgrade has succeeded: the new process serves, and this
// one is left with what its engine could not hand over.
func (u *upgrader) next(sigs <-chan os.Signal) (sig os.Signal, ok bool) {
	for {
		var done chan error
		if u.inflight != nil {
			done = u.inflight.done
		} else if len(u.deferred) > 0 {
			sig, u.deferred = u.deferred[0], u.deferred[1:]
			return sig, true
		}
		select {
		case sig := <-sigs:
			switch {
			case sig == upgradeSignal && u.inflight != nil:
				u.log.Warn("upgrade refused: one is in progress", "pid", u.inflight.cmd.Process.Pid)
			case sig == upgradeSignal:
				u.start()
			case u.inflight != nil:
				u.log.Warn("signal deferred until the upgrade ends", "signal", sig.String())
				u.deferred = append(u.deferred, sig)
			default:
				return sig, true
			}
		case err := <-done:
			if u.end(err) {
				return nil, false
			}
		}
	}
}

// start starts a new process and hands the relay over to it in the
// background.
func (u *upgrader) start() {
	p, err := u.exe, u.exeErr
	var np *newProcess
	if err == nil {
		np, err = startNew(p, u.aux)
	}
	if err != nil {
		u.log.Error("upgrade failed; keeping everything", "err", err)
		return
	}
	u.log.Info("upgrading: the new process is starting", "exe", p, "pid", np.cmd.Process.Pid)
	np.done = make(chan error, 1)
	u.inflight = np
	go func() { np.done <- np.handOver(u.srv) }()
}

// end finishes an upgrade whose hand-over returned err, and reports
// whether it succeeded.
func (u *upgrader) end(err error) bool {
	np := u.inflight
	u.inflight = nil
	pid := np.cmd.Process.Pid
	if err != nil {
		u.log.Error("upgrade failed; keeping everything", "pid", pid, "err", err)
		return false
	}
	u.log.Info("upgraded: the new process serves", "pid", pid)
	for _, sig := range u.deferred {
		u.log.Info("signal passed to the new process", "signal", sig.String(), "pid", pid)
		np.cmd.Process.Signal(sig)
	}
	u.deferred = nil
	return true
}

// inherited is what the old process passed to a process an upgrade
// started; nil in a process started otherwise.
type inherited struct {
	conn  *net.UnixConn
	ready *os.File
	lns   map[string]net.Listener
}

// inheritUpgrade returns what the old process passed, if this process
// was started by an upgrade, and clears the variables that say so.
func inheritUpgrade() (*inherited, error) {
	v, ok := os.LookupEnv(envUpgradeFD)
	if !ok {
		return nil, nil
	}
	ready, named := os.Getenv(envUpgradeReady), os.Getenv(envUpgradeListeners)
	for _, k := range []string{envUpgradeFD, envUpgradeReady, envUpgradeListeners} {
		os.Unsetenv(k)
	}
	in := &inherited{lns: map[string]net.Listener{}}
	bad := func(k, v string) (*inherited, error) {
		in.close()
		return nil, fmt.Errorf("upgrade: %s=%q is not a descriptor this process has", k, v)
	}
	f := inheritedFile(v, "upgrade")
	if f == nil {
		return bad(envUpgradeFD, v)
	}
	c, err := net.FileConn(f)
	f.Close()
	uc, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		return bad(envUpgradeFD, v)
	}
	in.conn = uc
	if in.ready = inheritedFile(ready, "upgrade-ready"); in.ready == nil {
		return bad(envUpgradeReady, ready)
	}
	for _, nf := range strings.Split(named, ",") {
		name, fd, _ := strings.Cut(nf, ":")
		if nf == "" {
			continue
		}
		f := inheritedFile(fd, name)
		if f == nil {
			return bad(envUpgradeListeners, named)
		}
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return bad(envUpgradeListeners, named)
		}
		in.lns[name] = ln
	}
	return in, nil
}

// inheritedFile returns the descriptor numbered s (3 or more), or nil.
func inheritedFile(s, name string) *os.File {
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil
	}
	return os.NewFile(uintptr(fd), name)
}

// listen returns a TCP listener at addr for the server name: the one the
// old process passed, if it listens there, or a new one.
func (in *inherited) listen(name, addr string) (net.Listener, error) {
	if in != nil && in.lns[name] != nil {
		ln := in.lns[name]
		delete(in.lns, name)
		if sameTCPAddr(ln.Addr(), addr) {
			return ln, nil
		}
		ln.Close()
	}
	return net.Listen("tcp", addr)
}

// sameTCPAddr reports whether a listener at addr would be bound where
// la is (port 0 takes any port).
func sameTCPAddr(la net.Addr, addr string) bool {
	ta, ok1 := la.(*net.TCPAddr)
	want, err := net.ResolveTCPAddr("tcp", addr)
	return ok1 && err == nil && ta.IP.Equal(want.IP) && (want.Port == 0 || want.Port == ta.Port)
}

// start starts srv, or in a process started by an upgrade, takes over
// the old process's relay with cfg in its place.
func (in *inherited) start(srv *relay.Server, cfg relay.Config) (*relay.Server, error) {
	if in == nil {
		return srv, srv.Start()
	}
	in.ready.Write([]byte{'L'}) // loaded: the old process starts the hand-over
	s, err := relay.TakeOver(cfg, in.conn)
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	return s, nil
}

// mainPID returns, in a process started by an upgrade, the line that
// tells systemd this process is the service's main one now. systemd
// accepts it from a process other than the main one only with
// NotifyAccess=all (systemd.service(5)).
func (in *inherited) mainPID() []string {
	if in == nil {
		return nil
	}
	return []string{sdnotify.MainPID(os.Getpid())}
}

// serving tells the old process that this one, started by an upgrade,
// serves (its pid file written, systemd told), so that it may exit.
func (in *inherited) serving() {
	if in == nil {
		return
	}
	in.ready.Write([]byte{'S'})
	in.close()
}

// close closes what the old process passed, but the listeners taken.
func (in *inherited) close() {
	if in == nil {
		return
	}
	if in.conn != nil {
		in.conn.Close()
		in.conn = nil
	}
	if in.ready != nil {
		in.ready.Close()
		in.ready = nil
	}
	for name, ln := range in.lns {
		ln.Close()
		delete(in.lns, name)
	}
}

// listenAux opens the listeners of the metrics and pprof servers the
// settings ask for: after an upgrade, those the old process passed.
func (f *relayFlags) listenAux(in *inherited) ([]auxListener, error) {
	var aux []auxListener
	for _, a := range []struct{ name, addr, example string }{
		{"metrics", f.cur.metrics, "127.0.0.1:9100"},
		{"pprof", f.pprofAddr, "127.0.0.1:6060"},
	} {
		if a.addr == "" {
			continue
		}
		err := checkHostPort(a.name, a.example, a.addr)
		var ln net.Listener
		if err == nil {
			if ln, err = in.listen(a.name, a.addr); err != nil {
				err = fmt.Errorf("%s: %w", a.name, err)
			}
		}
		if err != nil {
			for _, a := range aux {
				a.ln.Close()
			}
			return nil, err
		}
		aux = append(aux, auxListener{a.name, ln})
	}
	if f.cur.admin != "" {
		ln, err := listenAdminAux(in, f.cur.admin, f.cur.adminRemote)
		if err != nil {
			for _, a := range aux {
				a.ln.Close()
			}
			return nil, fmt.Errorf("admin: %w", err)
		}
		aux = append(aux, auxListener{"admin", ln})
	}
	return aux, nil
}

// serveAux starts the metrics, pprof and admin servers on their
// listeners.
func serveAux(aux []auxListener, srv *relay.Server, log *slog.Logger) (m *metricsServer, p *pprofServer, adm *adminServer) {
	for _, a := range aux {
		switch a.name {
		case "metrics":
			m = startMetrics(a.ln, srv, log)
		case "pprof":
			p = startPprof(a.ln, log)
		case "admin":
			adm = serveAdmin(a.ln, srv, log)
		}
	}
	return m, p, adm
}
