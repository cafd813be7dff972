//go:build linux

package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// upgradeBinaries are zeroio built twice, with the versions "v1" and
// "v2" (-ldflags -X main.version), for the upgrade tests to replace one
// by the other.
var upgradeBinaries struct {
	once sync.Once
	dir  string
	err  error
}

// upgradeBinary returns the path of the zeroio binary of version v (v1
// or v2), built once per test run, with -race if the tests run with it.
func upgradeBinary(t *testing.T, v string) string {
	t.Helper()
	b := &upgradeBinaries
	b.once.Do(func() {
		b.dir = filepath.Dir(binary)
		for _, v := range []string{"v1", "v2"} {
			args := []string{"build", "-ldflags", "-X main.version=" + v, "-o", filepath.Join(b.dir, "zeroio-"+v)}
			if raceEnabled {
				args = append(args, "-race")
			}
			out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
			if err != nil {
				b.err = fmt.Errorf("go build %s: %v\n%s", v, err, out)
				return
			}
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return filepath.Join(b.dir, "zeroio-"+v)
}

// install puts a copy of src at path the way a package manager does: a
// new file renamed over the old one, which a running process started
// from path keeps running.
func install(t *testing.T, src, path string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// relayTree is a zeroio relay started from a binary the test may replace,
// and every process that succeeds it. They share one stderr, a pipe the
// test reads until the last of them exits, so that the log goes on
// across upgrades.
type relayTree struct {
	t       *testing.T
	exe     string // the path the first process was started from
	pidFile string
	first   *exec.Cmd
	exited  chan struct{} // the first process has exited
	gone    chan struct{} // every process has: the log has ended
	*jsonLog
}

// startTree installs version v at dir/zeroio and runs `zeroio relay args`
// from there, with a pid file, and waits until it logged "listening" for
// want routes and wrote the pid file.
func startTree(t *testing.T, v string, want int, args ...string) *relayTree {
	t.Helper()
	dir := t.TempDir()
	rt := &relayTree{t: t, exe: filepath.Join(dir, "zeroio"), pidFile: filepath.Join(dir, "zeroio.pid"),
		exited: make(chan struct{}), gone: make(chan struct{}), jsonLog: newJSONLog()}
	install(t, upgradeBinary(t, v), rt.exe, 0o755)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"relay", "--log-format", "json", "--log-level", "info", "--pid-file", rt.pidFile}, args...)
	cmd := exec.Command(rt.exe, args...)
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	rt.first = cmd
	go func() {
		cmd.Wait()
		close(rt.exited)
	}()
	go func() {
		defer close(rt.gone)
		defer r.Close()
		rt.read(r)
	}()
	t.Cleanup(func() {
		for _, pid := range rt.pids() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-rt.exited
		if t.Failed() {
			rt.dump(t)
		}
	})
	rt.waitLog("listening", want)
	// The pid file is written once the routes listen.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(rt.pidFile); err == nil || time.Now().After(deadline) {
			break
		}
	}
	return rt
}

// waitLog waits until msg was logged n times in all.
func (rt *relayTree) waitLog(msg string, n int) []map[string]any {
	rt.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if l := rt.logs(msg); len(l) >= n {
			return l
		}
		select {
		case <-rt.update:
		case <-rt.gone:
			if l := rt.logs(msg); len(l) >= n {
				return l
			}
			rt.t.Fatalf("every process exited before %q was logged %d times", msg, n)
		case <-deadline:
			rt.t.Fatalf("%q not logged %d times", msg, n)
		}
	}
}

// pids returns the pid of every process of the tree that logged
// "started".
func (rt *relayTree) pids() []int {
	var out []int
	for _, l := range rt.logs("started") {
		if pid, ok := l["pid"].(float64); ok {
			out = append(out, int(pid))
		}
	}
	return out
}

// serving returns the pid the pid file names.
func (rt *relayTree) serving() int {
	rt.t.Helper()
	pid, err := readPidFile(rt.pidFile)
	if err != nil {
		rt.t.Fatal(err)
	}
	return pid
}

// upgrade installs version v over the binary, sends SIGUSR2 to the
// serving process and checks that it exits within exitBound (5 s), and
// that the pid file then names a new process that runs the new file and
// logs version v.
func (rt *relayTree) upgrade(v string) {
	rt.t.Helper()
	old, sent := rt.startUpgrade(v)
	rt.exits(old, sent, exitBound)
	rt.t.Logf("upgraded to %s: the old process exited %v after SIGUSR2", v, time.Since(sent).Round(time.Millisecond))
}

// startUpgrade installs version v over the binary, sends SIGUSR2 to the
// serving process and waits until it says the new one serves, which it
// checks: the pid file names it, it runs the new file and logged version
// v. It returns the old process's pid and when the signal was sent.
func (rt *relayTree) startUpgrade(v string) (int, time.Time) {
	t := rt.t
	t.Helper()
	old := rt.serving()
	install(t, upgradeBinary(t, v), rt.exe, 0o755)
	n := len(rt.logs("upgraded: the new process serves"))
	sent := time.Now()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	rt.waitLog("upgraded: the new process serves", n+1)
	pid := rt.serving()
	if pid == old {
		t.Fatalf("the pid file still names the old process %d", old)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != rt.exe {
		t.Fatalf("the new process %d runs %q (%v), want %s", pid, exe, err, rt.exe)
	}
	for _, l := range rt.logs("started") {
		if l["pid"] == float64(pid) && l["version"] != v {
			t.Fatalf("the new process %d logged version %v, want %s", pid, l["version"], v)
		}
	}
	return old, sent
}

// exits checks that the process pid exits within d of since.
func (rt *relayTree) exits(pid int, since time.Time, d time.Duration) {
	rt.t.Helper()
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Since(since) > d {
			rt.t.Fatalf("the old process %d still runs %v after SIGUSR2", pid, time.Since(since))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reports whether pid has exited and waits for its parent to
// reap it (the first process of a tree is the test's child).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z")
}

// streams are n long-lived connections through the relay to an echo
// target, each writing random bytes until stop and reading the echo.
type streams struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func startStreams(t *testing.T, addr string, n int) *streams {
	t.Helper()
	s := &streams{stop: make(chan struct{})}
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			if err := s.stream(c, uint64(i)); err != nil {
				s.mu.Lock()
				s.errs = append(s.errs, fmt.Errorf("stream %d: %w", i, err))
				s.mu.Unlock()
			}
		}()
	}
	return s
}

// stream writes 4 KiB of random bytes every 20 ms until stop, then
// closes its write side, and compares the SHA-256 of what it wrote with
// that of the echo read to EOF.
func (s *streams) stream(c net.Conn, seed uint64) error {
	sent, got := sha256.New(), sha256.New()
	var nsent int64
	werr := make(chan error, 1)
	go func() {
		r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
		buf := make([]byte, 4096)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				werr <- c.(*net.TCPConn).CloseWrite()
				return
			case <-tick.C:
			}
			r.Read(buf)
			sent.Write(buf)
			if _, err := c.Write(buf); err != nil {
				werr <- err
				return
			}
			nsent += int64(len(buf))
		}
	}()
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	n, rerr := io.Copy(got, c)
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read after %d bytes: %w", n, rerr)
	}
	if n != nsent || !hashEqual(sent, got) {
		return fmt.Errorf("echo differs: sent %d bytes, got %d", nsent, n)
	}
	return nil
}

func hashEqual(a, b hash.Hash) bool { return string(a.Sum(nil)) == string(b.Sum(nil)) }

// finish stops the streams and returns their errors.
func (s *streams) finish() []error {
	close(s.stop)
	s.wg.Wait()
	return s.errs
}

// dialLoop connects to addr again and again, one short echo each, and
// fetches url (the metrics server's /healthz) between, until stop;
// failures counts what failed.
type dialLoop struct {
	stop     chan struct{}
	done     chan struct{}
	n        atomic.Int64
	failures atomic.Int64
	mu       sync.Mutex
	first    error
}

func startDialLoop(addr, url string) *dialLoop {
	d := &dialLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for i := uint64(0); ; i++ {
			select {
			case <-d.stop:
				return
			default:
			}
			err := dialOnce(addr, i)
			if err == nil && url != "" {
				err = getOK(cl, url)
			}
			d.n.Add(1)
			if err != nil {
				d.failures.Add(1)
				d.mu.Lock()
				if d.first == nil {
					d.first = err
				}
				d.mu.Unlock()
			}
		}
	}()
	return d
}

func dialOnce(addr string, seed uint64) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, 1024, seed)
}

func getOK(cl *http.Client, url string) error {
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// finish stops the loop and fails t if any connection failed.
func (d *dialLoop) finish(t *testing.T) {
	t.Helper()
	close(d.stop)
	<-d.done
	if f := d.failures.Load(); f > 0 {
		t.Errorf("%d of %d new connections failed across the upgrade; the first: %v", f, d.n.Load(), d.first)
	}
	if d.n.Load() == 0 {
		t.Error("no new connection was tried")
	}
}

// upgradeConfig writes a config with extra (top-level keys), a TCP route
// to an echo target and the metrics server, on fixed ports, and returns
// its path, the route's address and the /healthz URL.
func upgradeConfig(t *testing.T, extra string) (conf, addr, healthz string) {
	t.Helper()
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	addr, metrics := freeAddr(t), freeAddr(t)
	conf = writeConfig(t, `%s
metrics: %s
routes:
  - name: echo
    listen: tcp://%s
    target: tcp://%s
`, extra, metrics, addr, backend)
	return conf, addr, "http://" + metrics + "/healthz"
}

// TestUpgradeStreams: 100 streams mid-transfer both ways and a loop of
// new connections (and /healthz requests) across SIGUSR2, which runs the
// replaced binary; the old process exits within 5 s, the pid file names
// the new one, and systemd (NOTIFY_SOCKET) hears its pid.
func TestUpgradeStreams(t *testing.T) {
	notify := filepath.Join(t.TempDir(), "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	t.Setenv("NOTIFY_SOCKET", notify)
	upgradeUnderLoad(t, 1, func(rt *relayTree) {
		pid := rt.serving()
		if !waitNotify(nc, fmt.Sprintf("MAINPID=%d\nREADY=1\n", pid)) {
			t.Errorf("systemd was not told MAINPID=%d and READY=1", pid)
		}
	})
}

// TestUpgradeTenTimes upgrades ten times in a row under the same load.
func TestUpgradeTenTimes(t *testing.T) {
	upgradeUnderLoad(t, 10, nil)
}

// upgradeUnderLoad starts a relay, 100 streams through it and a loop of
// new connections, upgrades it n times (v1 to v2, back to v1...),
// calling after, if not nil, after each, and checks that every stream
// and connection went through whole.
func upgradeUnderLoad(t *testing.T, n int, after func(*relayTree)) {
	conf, addr, healthz := upgradeConfig(t, "")
	rt := startTree(t, "v1", 1, "-c", conf)
	ss := startStreams(t, addr, 100)
	loop := startDialLoop(addr, healthz)
	for i := range n {
		time.Sleep(300 * time.Millisecond) // let the streams carry data
		rt.upgrade([]string{"v2", "v1"}[i%2])
		if after != nil {
			after(rt)
		}
	}
	time.Sleep(300 * time.Millisecond) // the streams go on through the new process
	loop.finish(t)
	for _, err := range ss.finish() {
		t.Error(err)
	}
}

// waitNotify reads systemd notifications from c until one begins with
// want.
func waitNotify(c *net.UnixConn, want string) bool {
	b := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		n, err := c.Read(b)
		if err != nil {
			return false
		}
		if strings.HasPrefix(string(b[:n]), want) {
			return true
		}
	}
}

// TestUpgradeFails: a new binary that cannot take over leaves the old
// process serving everything, with one line saying why.
func TestUpgradeFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare breaks the upgrade: it installs something at exe or
		// spoils the config file.
		prepare func(t *testing.T, exe, conf string)
		want    string // in the err of "upgrade failed; keeping everything"
	}{
		{"config error", func(t *testing.T, exe, conf string) {
			install(t, upgradeBinary(t, "v2"), exe, 0o755)
			if err := os.WriteFile(conf, []byte("routes: [\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "exit status 1"},
		{"exits at once", func(t *testing.T, exe, conf string) {
			writeScript(t, exe, "exit 3")
		}, "exit status 3"},
		{"not executable", func(t *testing.T, exe, conf string) {
			install(t, upgradeBinary(t, "v2"), exe, 0o644)
		}, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, addr, healthz := upgradeConfig(t, "")
			rt := startTree(t, "v1", 1, "-c", conf)
			old := rt.serving()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ping(t, c)
			loop := startDialLoop(addr, healthz)
			tc.prepare(t, rt.exe, conf)
			syscall.Kill(old, syscall.SIGUSR2)
			l := rt.waitLog("upgrade failed; keeping everything", 1)
			if err, _ := l[0]["err"].(string); !strings.Contains(err, tc.want) {
				t.Errorf("err %q, want it to say %q", err, tc.want)
			}
			ping(t, c)
			loop.finish(t)
			if pid := rt.serving(); pid != old {
				t.Errorf("the pid file names %d, want the old process %d", pid, old)
			}
			select {
			case <-rt.exited:
				t.Fatal("the old process exited")
			default:
			}
			if n := len(rt.logs("upgrade failed; keeping everything")); n != 1 {
				t.Errorf("%d failure lines, want 1", n)
			}
		})
	}
}

// writeScript installs a shell script at path.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	install(t, src, path, 0o755)
}

// TestUpgradeInFlight: while an upgrade is in flight, a second SIGUSR2
// is refused and SIGHUP waits for its end (here a failure: it then
// reloads).
func TestUpgradeInFlight(t *testing.T) {
	conf, addr, _ := upgradeConfig(t, "")
	rt := startTree(t, "v1", 1, "-c", conf)
	old := rt.serving()
	flag := filepath.Join(t.TempDir(), "go")
	// A new process that waits for the test to let it exit.
	writeScript(t, rt.exe, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; exit 1", flag))
	syscall.Kill(old, syscall.SIGUSR2)
	rt.waitLog("upgrading: the new process is starting", 1)
	syscall.Kill(old, syscall.SIGUSR2)
	rt.waitLog("upgrade refused: one is in progress", 1)
	syscall.Kill(old, syscall.SIGHUP)
	rt.waitLog("signal deferred until the upgrade ends", 1)
	if n := len(rt.logs("reloaded")); n != 0 {
		t.Fatalf("reloaded during the upgrade")
	}
	os.WriteFile(flag, nil, 0o644)
	rt.waitLog("upgrade failed; keeping everything", 1)
	rt.waitLog("reloaded", 1)
	if err := dialOnce(addr, 1); err != nil {
		t.Fatal(err)
	}
}

// TestPidFile: written at start, removed at exit.
func TestPidFile(t *testing.T) {
	conf, _, _ := upgradeConfig(t, "")
	rt := startTree(t, "v1", 1, "-c", conf)
	if pid := rt.serving(); pid != rt.first.Process.Pid {
		t.Fatalf("pid file names %d, want %d", pid, rt.first.Process.Pid)
	}
	rt.first.Process.Signal(syscall.SIGTERM)
	select {
	case <-rt.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("relay still running 10 s after SIGTERM")
	}
	if _, err := os.Stat(rt.pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pid file left at exit: %v", err)
	}
}

// TestUpgradeUDP: the datagrams of active UDP sessions across an
// upgrade; none may be lost beyond what the same traffic loses without
// one.
func TestUpgradeUDP(t *testing.T) {
	echo := udpEchoServer(t)
	addr := freeUDPAddr(t)
	conf := writeConfig(t, `
routes:
  - name: udp
    listen: udp://%s
    target: udp://%s
`, addr, echo.LocalAddr())
	rt := startTree(t, "v1", 1, "-c", conf)
	base := udpTraffic(t, addr, 20, time.Second, nil)
	lost := udpTraffic(t, addr, 20, 2*time.Second, func() { rt.upgrade("v2") })
	t.Logf("datagrams lost: %d without an upgrade, %d across one", base, lost)
	if lost > base {
		t.Errorf("%d datagrams lost across the upgrade, %d without", lost, base)
	}
}

func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// udpTraffic runs n sessions to addr, each sending a numbered datagram
// every 10 ms for d (calling during, if not nil, meanwhile), and
// returns how many echoes did not come back.
func udpTraffic(t *testing.T, addr string, n int, d time.Duration, during func()) int {
	t.Helper()
	var sent, got atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range n {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := fmt.Fprintf(c, "datagram %d", i); err == nil {
					sent.Add(1)
				}
			}
		}()
		go func() {
			b := make([]byte, 64)
			for {
				if _, err := c.Read(b); err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue // ECONNREFUSED from an ICMP error: counted as lost
				}
				got.Add(1)
			}
		}()
	}
	end := time.After(d)
	if during != nil {
		during()
	}
	<-end
	close(stop)
	wg.Wait()
	// Echoes still on their way.
	for deadline := time.Now().Add(2 * time.Second); got.Load() < sent.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return int(sent.Load() - got.Load())
}

// TestUpgradeGoroutineEngine: the goroutine engine hands over its
// listeners, and the old process keeps its established streams, drains
// them and exits once they end; new clients go to the new process.
func TestUpgradeGoroutineEngine(t *testing.T) {
	conf, addr, healthz := upgradeConfig(t, "engine: goroutine\nshutdown_timeout: 1m\n")
	rt := startTree(t, "v1", 1, "-c", conf)
	ss := startStreams(t, addr, 10)
	loop := startDialLoop(addr, healthz)
	time.Sleep(200 * time.Millisecond) // let the streams carry data
	old, _ := rt.startUpgrade("v2")
	time.Sleep(300 * time.Millisecond)
	loop.finish(t)
	if zombie(old) {
		t.Fatal("the old process exited with streams open")
	}
	for _, err := range ss.finish() {
		t.Error(err)
	}
	rt.exits(old, time.Now(), exitBound)
}

// TestUpgradeDeferredSignal: SIGTERM during an upgrade that succeeds goes
// to the new process, which shuts down and removes the pid file.
func TestUpgradeDeferredSignal(t *testing.T) {
	conf, _, _ := upgradeConfig(t, "")
	rt := startTree(t, "v1", 1, "-c", conf)
	old := rt.serving()
	// The new binary starts late enough for the signal to meet the
	// upgrade in flight.
	writeScript(t, rt.exe, fmt.Sprintf("sleep 0.5; exec %s \"$@\"", upgradeBinary(t, "v2")))
	syscall.Kill(old, syscall.SIGUSR2)
	rt.waitLog("upgrading: the new process is starting", 1)
	syscall.Kill(old, syscall.SIGTERM)
	rt.waitLog("signal deferred until the upgrade ends", 1)
	rt.waitLog("upgraded: the new process serves", 1)
	l := rt.waitLog("signal passed to the new process", 1)
	if l[0]["signal"] != "terminated" {
		t.Errorf("passed %v, want terminated", l[0]["signal"])
	}
	rt.waitLog("stopped", 2) // the old process, then the new one
	select {
	case <-rt.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("a process of the relay still runs")
	}
	if _, err := os.Stat(rt.pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pid file left at exit: %v", err)
	}
}
