package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zeroio-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "zeroio")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building zeroio: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running zeroio relay whose JSON log is parsed as it arrives.
type proc struct {
	cmd *exec.Cmd
	*jsonLog
	exited chan struct{}
	err    error
}

// jsonLog is a relay's JSON log (one process's, or that of several
// sharing a stderr), parsed line by line as it arrives.
type jsonLog struct {
	mu     sync.Mutex
	lines  []map[string]any
	update chan struct{} // a value after each new line
}

func newJSONLog() *jsonLog { return &jsonLog{update: make(chan struct{}, 1)} }

// read parses the lines of r until it ends.
func (l *jsonLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			m = map[string]any{"msg": "RAW " + sc.Text()}
		}
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
		select {
		case l.update <- struct{}{}:
		default:
		}
	}
}

// logs returns the lines logged with msg.
func (l *jsonLog) logs(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// dump writes every line to t's log.
func (l *jsonLog) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.lines {
		t.Logf("relay log: %v", m)
	}
}

// startProc runs zeroio relay with args and waits until it logged
// "listening" for want routes.
func startProc(t *testing.T, want int, args ...string) *proc {
	t.Helper()
	return startProcUnder(t, nil, want, args...)
}

// startProcUnder is startProc with the relay run under a wrapper command
// (sh -c '... exec "$@"' ...), or directly if wrapper is nil.
func startProcUnder(t *testing.T, wrapper []string, want int, args ...string) *proc {
	t.Helper()
	return launch(t, wrapper, want, append([]string{"--log-format", "json", "--log-level", "debug"}, args...)...)
}

// launch runs zeroio relay with args alone (the JSON log format, which
// proc parses, is for the caller to ask), under wrapper if not nil.
func launch(t *testing.T, wrapper []string, want int, args ...string) *proc {
	t.Helper()
	return launchCmd(t, nil, wrapper, want, args...)
}

// launchCmd is launch with the command prepared by prep, if not nil,
// before it starts (files to pass, the environment).
func launchCmd(t *testing.T, prep func(*exec.Cmd), wrapper []string, want int, args ...string) *proc {
	t.Helper()
	argv := append(append(wrapper[:len(wrapper):len(wrapper)], binary), append([]string{"relay"}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	if prep != nil {
		prep(cmd)
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, jsonLog: newJSONLog(), exited: make(chan struct{})}
	go func() {
		p.read(stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			p.dump(t)
		}
	})
	p.waitLog(t, "listening", want)
	return p
}

// waitLog waits until msg was logged n times in all.
func (p *proc) waitLog(t *testing.T, msg string, n int) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		if len(p.logs(msg)) >= n {
			return
		}
		select {
		case <-p.update:
		case <-p.exited:
			t.Fatalf("relay exited (%v) before logging %q", p.err, msg)
		case <-deadline:
			t.Fatalf("relay did not log %q %d times", msg, n)
		}
	}
}

// addr returns the listen address logged for route.
func (p *proc) addr(t *testing.T, route string) string {
	for _, l := range p.logs("listening") {
		if l["route"] == route {
			return l["listen"].(string)
		}
	}
	t.Fatalf("route %q not listening", route)
	return ""
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		t.Fatalf("relay still running after %v", d)
		return nil
	}
}

// echoServer is a TCP or Unix echo backend.
func echoServer(t *testing.T, network, addr string) net.Listener {
	return serve(t, network, addr, func(c net.Conn) {
		io.Copy(c, c)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	})
}

// serve is a backend on network and addr that runs handle for each
// connection on a goroutine of its own, then closes the connection; the
// listener closes when the test ends.
func serve(t *testing.T, network, addr string, handle func(net.Conn)) net.Listener {
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

// writeConfig writes a relay config file, format filled in with args, in
// a temporary directory and returns its path.
func writeConfig(t *testing.T, format string, args ...any) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, format, args...), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// udpEchoServer is a UDP echo backend on 127.0.0.1.
func udpEchoServer(t *testing.T) net.PacketConn {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
	return c
}

func roundTrip(c net.Conn, size int, seed uint64) error {
	c.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(data)
	go func() {
		c.Write(data)
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("echo of %d bytes: got %d bytes, %s", size, len(got), firstDiff(got, data))
	}
	return nil
}

// firstDiff describes where got first differs from want, with the bytes
// around it, so that a failure says what was lost, added or changed.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	clip := func(b []byte) []byte { return b[min(i, len(b)):min(i+64, len(b))] }
	return fmt.Sprintf("first difference at byte %d: got %q, want %q", i, clip(got), clip(want))
}

// stackTrace matches a goroutine's header in a Go stack trace (an error
// may name the goroutine engine).
var stackTrace = regexp.MustCompile(`goroutine \d+ \[`)

func TestUsageErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	dir := t.TempDir()
	cfg := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no args", nil, "need LISTEN and TARGET"},
		{"one arg", []string{"tcp://127.0.0.1:0"}, "need LISTEN and TARGET"},
		{"bad second target", []string{"tcp://127.0.0.1:0", "tcp://" + backend, "x"}, "has no scheme"},
		{"bad flag", []string{"--bogus"}, "flag provided but not defined"},
		{"bad duration", []string{"--idle-timeout", "soon", "tcp://127.0.0.1:0", "tcp://" + backend}, "invalid value"},
		{"no host", []string{"tcp://:8080", "tcp://" + backend}, "has no host"},
		{"no scheme", []string{"127.0.0.1:0", "tcp://" + backend}, "has no scheme"},
		{"bad port", []string{"tcp://127.0.0.1:99999", "tcp://" + backend}, "not a number"},
		{"udp to tcp", []string{"udp://127.0.0.1:0", "tcp://" + backend}, "UDP relays only to UDP"},
		{"bad cidr", []string{"--allow", "10.0.0.1/33", "tcp://127.0.0.1:0", "tcp://" + backend}, "not a CIDR"},
		{"host bits", []string{"--allow", "10.0.0.1/8", "tcp://127.0.0.1:0", "tcp://" + backend}, "host bits"},
		{"bad proxy version", []string{"--send-proxy", "v3", "tcp://127.0.0.1:0", "tcp://" + backend}, "want v1 or v2"},
		{"negative shutdown timeout", []string{"--shutdown-timeout", "-5s", "tcp://127.0.0.1:0", "tcp://" + backend}, "is negative"},
		{"negative shutdown timeout in file", []string{"-c", cfg("neg.yaml", "shutdown_timeout: -5s\nroutes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://"+backend+"}\n")}, "is negative"},
		{"negative udp buffer", []string{"--udp-buffer", "-1", "udp://127.0.0.1:0", "udp://127.0.0.1:53"}, "negative"},
		{"unix mode on tcp", []string{"--unix-mode", "0600", "tcp://127.0.0.1:0", "tcp://" + backend}, "need a Unix socket path"},
		{"unknown unix group", []string{"--unix-group", "no-such-group-zeroio", "unix://" + filepath.Join(dir, "g.sock"), "tcp://" + backend}, "unix group"},
		{"bad unix mode", []string{"--unix-mode", "rw-rw----", "unix://" + filepath.Join(dir, "m.sock"), "tcp://" + backend}, "not a file mode"},
		{"port in use", []string{busy.Addr().Network() + "://" + busy.Addr().String(), "tcp://" + backend}, "address already in use"},
		{"admin not on loopback", []string{"--admin", "0.0.0.0:9901", "tcp://127.0.0.1:0", "tcp://" + backend}, "not a loopback address"},
		{"admin address in use", []string{"--admin", busy.Addr().String(), "tcp://127.0.0.1:0", "tcp://" + backend}, "address already in use"},
		// Every bad value is refused at start, the same from flags and
		// files, by relay.Route's validation.
		{"negative dial timeout", []string{"--dial-timeout", "-1s", "tcp://127.0.0.1:0", "tcp://" + backend}, "dial timeout -1s is negative"},
		{"negative idle timeout", []string{"--idle-timeout", "-1s", "tcp://127.0.0.1:0", "tcp://" + backend}, "idle timeout -1s is negative"},
		{"negative proxy header timeout", []string{"--accept-proxy", "--proxy-header-timeout", "-1s", "tcp://127.0.0.1:0", "tcp://" + backend}, "PROXY header timeout -1s is negative"},
		{"negative session timeout", []string{"--session-timeout", "-1s", "udp://127.0.0.1:0", "udp://127.0.0.1:53"}, "session timeout -1s is negative"},
		{"negative keepalive", []string{"--keepalive", "-1s", "tcp://127.0.0.1:0", "tcp://" + backend}, "keep-alive period -1s is negative"},
		{"negative idle timeout in file", []string{"-c", cfg("negidle.yaml", "routes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://"+backend+", idle_timeout: -5s}\n")}, "idle timeout -5s is negative"},
		{"negative workers", []string{"--workers", "-2", "tcp://127.0.0.1:0", "tcp://" + backend}, "negative workers"},
		{"negative limit", []string{"--max-conns-per-client", "-1", "tcp://127.0.0.1:0", "tcp://" + backend}, "negative connection"},
		{"trusted proxy without accept", []string{"--trusted-proxy", "10.0.0.0/8", "tcp://127.0.0.1:0", "tcp://" + backend}, "need accept_proxy"},
		{"target is own listen", []string{"tcp://127.0.0.1:7777", "tcp://127.0.0.1:7777"}, "relay to itself"},
		{"target is own wildcard listen", []string{"tcp://0.0.0.0:7777", "tcp://127.0.0.1:7777"}, "relay to itself"},
		{"target is another route", []string{"-c", cfg("chain.yaml", "routes:\n  - {name: a, listen: tcp://127.0.0.1:7777, target: tcp://127.0.0.1:7778}\n  - {name: b, listen: tcp://127.0.0.1:7778, target: tcp://"+backend+"}\n")}, "relay to itself"},
		{"unknown policy", []string{"--balance", "random", "tcp://127.0.0.1:0", "tcp://" + backend}, `balance "random"`},
		{"mixed targets", []string{"tcp://127.0.0.1:0", "tcp://" + backend, "udp://127.0.0.1:53"}, "UDP relays only to UDP"},
		{"empty target list", []string{"-c", cfg("notargets.yaml", "routes:\n  - {listen: tcp://127.0.0.1:0, targets: []}\n")}, "needs a listen address and a target"},
		{"every weight 0", []string{"-c", cfg("w0.yaml", "routes:\n  - listen: tcp://127.0.0.1:0\n    targets: [{url: tcp://"+backend+", weight: 0}, {url: tcp://127.0.0.1:1, weight: 0}]\n")}, "every target has weight 0"},
		{"target and targets", []string{"-c", cfg("both.yaml", "routes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://"+backend+", targets: [tcp://127.0.0.1:1]}\n")}, "not both"},
		{"health check on udp", []string{"--health-interval", "1s", "udp://127.0.0.1:0", "udp://127.0.0.1:53"}, "stream routes"},
		{"unknown engine", []string{"--engine", "epoll", "tcp://127.0.0.1:0", "tcp://" + backend}, `unknown engine "epoll"`},
		{"unknown engine in file", []string{"-c", cfg("engine.yaml", "engine: threads\nroutes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://"+backend+"}\n")}, `unknown engine "threads"`},
		{"bad conn-log", []string{"--conn-log", "loud", "tcp://127.0.0.1:0", "tcp://" + backend}, "conn-log"},
		{"bad log level", []string{"--log-level", "loud", "tcp://127.0.0.1:0", "tcp://" + backend}, "log level"},
		{"metrics no host", []string{"--metrics", ":9100", "tcp://127.0.0.1:0", "tcp://" + backend}, "has no host"},
		{"missing config", []string{"-c", filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"both", []string{"-c", "x.yaml", "tcp://127.0.0.1:0", "tcp://" + backend}, "not both"},
		{"yaml syntax", []string{"-c", cfg("syntax.yaml", "routes: [\n")}, "syntax.yaml"},
		{"yaml unknown key", []string{"-c", cfg("unknown.yaml", "routes:\n  - listen: tcp://127.0.0.1:0\n    target: tcp://"+backend+"\n    idle_timeot: 5s\n")}, "idle_timeot"},
		{"yaml no routes", []string{"-c", cfg("empty.yaml", "max_conns: 5\n")}, "no routes"},
		{"yaml bad route", []string{"-c", cfg("badroute.yaml", "routes:\n  - listen: tcp://:80\n    target: tcp://"+backend+"\n")}, "has no host"},
		{"yaml duplicate name", []string{"-c", cfg("dup.yaml", "routes:\n  - {name: a, listen: tcp://127.0.0.1:0, target: tcp://"+backend+"}\n  - {name: a, listen: tcp://127.0.0.1:0, target: tcp://"+backend+"}\n")}, "name used twice"},
		{"unknown command", nil, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"relay"}, tc.args...)
			if tc.name == "unknown command" {
				args = []string{"relai"}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, binary, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() == 0 {
				t.Fatalf("exit %v, want non-zero; stderr %q", err, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.want) {
				t.Fatalf("stderr %q: want one line containing %q", msg, tc.want)
			}
			if stackTrace.MatchString(msg) || strings.Contains(msg, "panic") {
				t.Fatalf("stack trace: %s", msg)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"relay", "--help"}, {"relay", "-h"}, {"help"}, {"version"}} {
		out, err := exec.Command(binary, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if args[0] == "relay" && (!bytes.Contains(out, []byte("Examples:")) || !bytes.Contains(out, []byte("-idle-timeout"))) {
			t.Fatalf("relay help lacks examples or flags:\n%s", out)
		}
		if args[0] == "relay" && (bytes.Count(out, []byte("\n")) > 50 || !bytes.Contains(out, []byte("docs/relay.md"))) {
			t.Fatalf("relay help: want at most 50 lines and a pointer to docs/relay.md:\n%s", out)
		}
	}
	// The short help names flags that exist; zeroio help relay lists
	// every one.
	fs := newRelayFlags().fs
	for _, m := range mostUsed {
		if fs.Lookup(m.name) == nil {
			t.Errorf("relay --help names %s, which is no flag", m.name)
		}
	}
	out, err := exec.Command(binary, "help", "relay").Output()
	if err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(f.Name) + `[ \t\n]`).Match(out) {
			t.Errorf("zeroio help relay lacks -%s", f.Name)
		}
	})
}

// TestRelayBinary runs the real binary on loopback: hash-verified streams
// TCP to TCP, TCP to Unix and Unix to TCP, a socat client, a UDP route on
// two SO_REUSEPORT sockets, and the metrics endpoint.
func TestRelayBinary(t *testing.T) {
	dir := t.TempDir()
	tcpBackend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	unixBackend := filepath.Join(dir, "b.sock")
	echoServer(t, "unix", unixBackend)
	unixListen := filepath.Join(dir, "l.sock")
	udpEcho := udpEchoServer(t)
	metrics := freeAddr(t)
	conf := writeConfig(t, `
metrics: %s
defaults:
  idle_timeout: 30s
routes:
  - name: t2t
    listen: tcp://127.0.0.1:0
    target: tcp://%s
  - name: t2u
    listen: tcp://[::1]:0
    target: unix://%s
  - name: u2t
    listen: unix://%s
    target: tcp://%s
  - name: udp
    listen: udp://127.0.0.1:0
    target: udp://%s
    session_timeout: 5s
    workers: 2
`, metrics, tcpBackend, unixBackend, unixListen, tcpBackend, udpEcho.LocalAddr())
	p := startProc(t, 4, "-c", conf)
	for _, route := range []string{"t2t", "t2u", "u2t"} {
		t.Run(route, func(t *testing.T) {
			network := "tcp"
			if route == "u2t" {
				network = "unix"
			}
			addr := p.addr(t, route)
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial(network, addr)
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					if err := roundTrip(c, 1+i*300_001, uint64(i)); err != nil {
						t.Errorf("stream %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
		})
	}
	t.Run("udp", func(t *testing.T) {
		c, err := net.Dial("udp", p.addr(t, "udp"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 2048)
		got := 0
		for i := range 100 {
			msg := fmt.Appendf(nil, "datagram %d", i)
			c.Write(msg)
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(buf); err == nil && string(buf[:n]) == string(msg) {
				got++
			}
		}
		if got < 95 {
			t.Fatalf("%d of 100 datagrams echoed through the relay", got)
		}
	})
	t.Run("300-concurrent-streams", func(t *testing.T) {
		// Every stream open at once, each hash-verified both ways.
		addr := p.addr(t, "t2t")
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				if err := roundTrip(c, 64<<10+i, uint64(1000+i)); err != nil {
					t.Errorf("stream %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("socat", func(t *testing.T) {
		if _, err := exec.LookPath("socat"); err != nil {
			t.Skipf("socat: %v", err)
		}
		cmd := exec.Command("socat", "-", "TCP:"+p.addr(t, "t2t"))
		cmd.Stdin = strings.NewReader("hello through socat\n")
		out, err := cmd.Output()
		if err != nil || string(out) != "hello through socat\n" {
			t.Fatalf("socat: %q %v", out, err)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wants := []string{
			`zeroio_relay_bytes_total{direction="up",route="t2t"}`,
			`zeroio_relay_connections_accepted_total{route="u2t"} 10`,
			`zeroio_relay_errors_total{kind="dial",route="t2u"} 0`,
			`zeroio_relay_udp_sessions_total{route="udp"} 1`,
			"process_resident_memory_bytes",
			`zeroio_splice_copies_total{path="splice"}`,
			"zeroio_pool_bytes_held",
		}
		if runtime.GOOS == "linux" { // the event engine, the default there
			wants = append(wants, `zeroio_relay_event_loop_connections{loop="0"}`)
		}
		for _, want := range wants {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(unixListen); !os.IsNotExist(err) {
		t.Errorf("unix socket left behind: %v", err)
	}
}

// TestReloadAndGracefulShutdown: SIGHUP adds and removes routes without
// touching an established connection; SIGTERM waits for it, and /healthz
// turns from 200 to 503 meanwhile.
func TestReloadAndGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	conf := filepath.Join(dir, "relay.yaml")
	write := func(names ...string) {
		var b strings.Builder
		b.WriteString("routes:\n")
		for _, n := range names {
			fmt.Fprintf(&b, "  - {name: %s, listen: tcp://127.0.0.1:0, target: tcp://%s}\n", n, backend)
		}
		os.WriteFile(conf, []byte(b.String()), 0o644)
	}
	write("a")
	metrics := freeAddr(t)
	p := startProc(t, 1, "-c", conf, "--shutdown-timeout", "20s", "--metrics", metrics)
	healthz := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := healthz(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz while serving: %d %q", code, body)
	}
	aAddr := p.addr(t, "a")
	c, err := net.Dial("tcp", aAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ping(t, c)

	write("b")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	bAddr := p.addr(t, "b")
	c2, err := net.Dial("tcp", bAddr)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c2)
	c2.Close()
	if c3, err := net.Dial("tcp", aAddr); err == nil {
		c3.Close()
		t.Fatal("removed route a still accepts")
	}
	ping(t, c) // the established connection on route a is untouched

	// A bad config on SIGHUP is logged and changes nothing.
	os.WriteFile(conf, []byte("routes: [\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reload failed; keeping the running config", 1)
	if c4, err := net.Dial("tcp", bAddr); err != nil {
		t.Fatalf("route b lost after a bad reload: %v", err)
	} else {
		c4.Close()
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog(t, "shutting down", 1)
	select {
	case <-p.exited:
		t.Fatal("relay exited with a connection in flight")
	case <-time.After(300 * time.Millisecond):
	}
	if code, body := healthz(); code != http.StatusServiceUnavailable || body != "shutting down\n" {
		t.Fatalf("/healthz while draining: %d %q", code, body)
	}
	ping(t, c)
	if err := roundTrip(c, 1<<20, 7); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// TestReloadGlobalLimitAndSignals: a reload applies the file's new
// max_conns (it is not taken for a --max-conns flag), and a SIGHUP during
// the shutdown drain does not swallow the second SIGTERM that closes at
// once.
func TestReloadGlobalLimitAndSignals(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(max int) {
		os.WriteFile(conf, fmt.Appendf(nil, "max_conns: %d\nroutes:\n  - {name: a, listen: tcp://127.0.0.1:0, target: tcp://%s}\n", max, backend), 0o644)
	}
	write(1)
	p := startProc(t, 1, "-c", conf, "--shutdown-timeout", "60s")
	addr := p.addr(t, "a")
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := dial()
	ping(t, held)
	// At max_conns 1 a second client waits in the listen backlog; the
	// reload that raises the limit lets it in.
	waiting := dial()
	io.WriteString(waiting, "ping")
	write(10)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	waiting.SetDeadline(time.Now().Add(10 * time.Second))
	var buf [4]byte
	if _, err := io.ReadFull(waiting, buf[:]); err != nil {
		t.Fatalf("client waiting at max_conns 1, after a reload raised it: %v", err)
	}
	ping(t, dial()) // the new limit holds

	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog(t, "shutting down", 1)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "SIGHUP ignored: shutting down", 1)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog(t, "second signal: closing now", 1)
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("exit after the second SIGTERM: %v", err)
	}
	if len(p.logs("connections closed at the second signal")) != 1 || len(p.logs("connections closed at the shutdown deadline")) != 0 {
		t.Error("the connections the second SIGTERM closed were not logged as such")
	}
}

// TestReloadProcessSettings: a reload applies the file's new log_level
// and shutdown_timeout, as the start does, and says that a new metrics
// address takes a restart rather than ignoring it.
func TestReloadProcessSettings(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	listen := freeAddr(t)
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(extra string) {
		os.WriteFile(conf, fmt.Appendf(nil, "log_format: json\nconn_log: info\n%sroutes:\n  - {name: a, listen: tcp://%s, target: tcp://%s}\n", extra, listen, backend), 0o644)
	}
	write("log_level: warn\nshutdown_timeout: 60s\n")
	p := launch(t, nil, 0, "-c", conf)
	var c net.Conn
	for i := 0; ; i++ { // nothing is logged at warn: wait for the port
		var err error
		if c, err = net.Dial("tcp", listen); err == nil {
			break
		}
		if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ping(t, c)
	c.Close()

	write("log_level: info\nshutdown_timeout: 60s\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c)
	c.Close()
	p.waitLog(t, "connection", 1) // at info now

	write("log_level: info\nshutdown_timeout: 100ms\nmetrics: 127.0.0.1:9\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "the metrics address changes only at a restart; keeping the running one", 1)
	p.waitLog(t, "reloaded", 2)
	held, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ping(t, held)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 10*time.Second); err != nil { // not 60s
		t.Fatalf("exit: %v", err)
	}
	if len(p.logs("connections closed at the shutdown deadline")) != 1 {
		t.Fatal("the connection in flight was not closed at the new shutdown timeout")
	}
}

func ping(t *testing.T, c net.Conn) {
	t.Helper()
	if err := pingErr(c); err != nil {
		t.Fatal(err)
	}
}

// pingErr is ping for other goroutines than the test's: it returns the
// error for the caller to report with t.Error.
func pingErr(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "ping")
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "ping" {
		return fmt.Errorf("ping: %q %v", b, err)
	}
	return nil
}

// TestIperf3 drives the relay with iperf3 in both directions.
func TestIperf3(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skipf("iperf3: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command("iperf3", "-s", "-B", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var p *proc
	for range 50 { // until iperf3 listens
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			p = startProc(t, 1, "tcp://127.0.0.1:0", "tcp://"+ln.Addr().String())
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p == nil {
		t.Fatal("iperf3 server did not start")
	}
	host, rport, _ := net.SplitHostPort(p.addr(t, "tcp://127.0.0.1:0"))
	for _, reverse := range []bool{false, true} {
		args := []string{"-c", host, "-p", rport, "-t", "1", "-J"}
		if reverse {
			args = append(args, "-R")
		}
		// iperf3's server handles one connection at a time: a client that
		// arrives while it is still dropping a probe connection (ours, or
		// the relay's target check) is refused with "control socket has
		// closed unexpectedly", and one that arrives before it has ended
		// the previous test with "the server is busy running a test".
		// Retry those, and only those.
		var out []byte
		var err error
		for try := 0; ; try++ {
			out, err = exec.Command("iperf3", args...).Output()
			if try < 5 && (bytes.Contains(out, []byte("control socket has closed unexpectedly")) ||
				bytes.Contains(out, []byte("the server is busy running a test"))) {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			break
		}
		if err != nil {
			t.Fatalf("iperf3 %v: %v\n%s", args, err, out)
		}
		var res struct {
			End struct {
				SumReceived struct {
					Bytes float64 `json:"bytes"`
					Bps   float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.Bytes == 0 {
			t.Fatalf("iperf3 -R=%v: %v %s", reverse, err, out)
		}
		t.Logf("iperf3 reverse=%v: %.1f Gbit/s", reverse, res.End.SumReceived.Bps/1e9)
	}
}

// TestCheckConfig: --check-config validates and lists the routes without
// listening, checks targets unless --no-check, and fails like a real start
// on a bad config.
func TestCheckConfig(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	listen := freeAddr(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "relay.yaml")
	os.WriteFile(conf, []byte(fmt.Sprintf("metrics: 127.0.0.1:0\nroutes:\n  - {name: web, listen: tcp://%s, target: tcp://%s}\n  - {name: dns, listen: udp://127.0.0.1:0, target: udp://127.0.0.1:53}\n", listen, backend)), 0o644)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, binary, append([]string{"relay", "--check-config"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := run("-c", conf)
	want := fmt.Sprintf("route web: tcp://%s -> tcp://%s\nroute dns: udp://127.0.0.1:0 -> udp://127.0.0.1:53\nconfig ok: 2 routes\n", listen, backend)
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	// Nothing listened: the route's port is still free.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("--check-config left %s bound: %v", listen, err)
	}
	ln.Close()

	// --check-config dials nothing; --check-targets dials each target
	// and fails if one is down. --no-check is accepted and does nothing.
	for _, args := range [][]string{{"tcp://127.0.0.1:0", "tcp://127.0.0.1:1"}, {"--no-check", "tcp://127.0.0.1:0", "tcp://127.0.0.1:1"}} {
		if out, errOut, code := run(args...); code != 0 || !strings.HasSuffix(out, "config ok: 1 route\n") {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	out, errOut, code = run("--check-targets", "tcp://127.0.0.1:0", "tcp://"+backend, "tcp://127.0.0.1:1")
	if code == 0 || !strings.Contains(out, "target tcp://"+backend+": up") || !strings.Contains(out, "target tcp://127.0.0.1:1: DOWN") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("--check-targets with one down: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := run("--check-targets", "tcp://127.0.0.1:0", "tcp://"+backend); code != 0 {
		t.Fatalf("--check-targets all up: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	os.WriteFile(conf, []byte("routes:\n  - {listen: tcp://:80, target: tcp://"+backend+"}\n"), 0o644)
	if _, errOut, code := run("-c", conf); code == 0 || !strings.Contains(errOut, "has no host") {
		t.Fatalf("bad config: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := run("--metrics", ":9100", "--no-check", "tcp://127.0.0.1:0", "tcp://127.0.0.1:1"); code == 0 || !strings.Contains(errOut, "has no host") {
		t.Fatalf("bad metrics address: exit %d, stderr %q", code, errOut)
	}
	for _, m := range []string{"127.0.0.1:notaport", "127.0.0.1:99999"} {
		if _, errOut, code := run("--metrics", m, "--no-check", "tcp://127.0.0.1:0", "tcp://127.0.0.1:1"); code == 0 || !strings.Contains(errOut, "bad port") {
			t.Errorf("metrics address %s: exit %d, stderr %q", m, code, errOut)
		}
	}
	os.WriteFile(conf, []byte("routes:\n  - {listen: tcp://127.0.0.1:0, target: tcp://"+backend+"}\n---\nroutes: bogus\n"), 0o644)
	if _, errOut, code := run("-c", conf); code == 0 || !strings.Contains(errOut, "more than one YAML document") {
		t.Errorf("a second YAML document: exit %d, stderr %q", code, errOut)
	}
}

// TestReloadConnLogUnset: a reload of a file that no longer sets conn_log
// brings the connection lines back to --conn-log's default (debug), as
// for log_level, rather than keeping the level the file used to give.
func TestReloadConnLogUnset(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	listen := freeAddr(t)
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(extra string) {
		os.WriteFile(conf, fmt.Appendf(nil, "%sroutes:\n  - {name: a, listen: tcp://%s, target: tcp://%s}\n", extra, listen, backend), 0o644)
	}
	write("conn_log: off\n")
	p := startProc(t, 1, "-c", conf) // at log level debug
	write("")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c)
	c.Close()
	p.waitLog(t, "connection", 1)
}

// TestReloadEngineWarning: naming the engine the relay already runs (its
// platform's default) in the file is no change and draws no warning; a
// different engine draws one, but only from a reload that is applied.
func TestReloadEngineWarning(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("one engine only")
	}
	const warn = "the engine changes only at a restart; keeping the running one"
	listen := freeAddr(t)
	conf := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(extra string) {
		os.WriteFile(conf, fmt.Appendf(nil, "%sroutes:\n  - {name: a, listen: tcp://%s, target: tcp://127.0.0.1:1}\n", extra, listen), 0o644)
	}
	write("")
	p := startProc(t, 1, "-c", conf)
	write("engine: event\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	if n := len(p.logs(warn)); n != 0 {
		t.Fatalf("engine: event on the event engine: %d warnings", n)
	}
	write("engine: goroutine\nconn_log: bogus\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reload failed; keeping the running config", 1)
	if n := len(p.logs(warn)); n != 0 {
		t.Fatalf("a failed reload warned about the engine")
	}
	write("engine: goroutine\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 2)
	w := p.logs(warn)
	if len(w) != 1 || w[0]["engine"] != "event" || w[0]["file"] != "goroutine" {
		t.Fatalf("warnings %v", w)
	}
}
