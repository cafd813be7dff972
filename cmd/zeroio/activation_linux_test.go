package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// activator is the launcher of a socket-activated relay: sh sets
// LISTEN_PID to its own pid and execs the relay, which so has that pid,
// as systemd does (sd_listen_fds(3)).
var activator = []string{"sh", "-c", `export LISTEN_PID=$$; exec "$@"`, "sh"}

// activation passes files to the relay as descriptors 3 and on, with
// LISTEN_FDS (and LISTEN_FDNAMES, if names is not empty) saying so.
func activation(files []*os.File, names string) func(*exec.Cmd) {
	return func(cmd *exec.Cmd) {
		cmd.ExtraFiles = files
		cmd.Env = append(os.Environ(), "LISTEN_FDS="+strconv.Itoa(len(files)))
		if names != "" {
			cmd.Env = append(cmd.Env, "LISTEN_FDNAMES="+names)
		}
	}
}

// launcherSocket binds a socket as a launcher would and returns its file
// (the socket's only descriptor) and its inode.
func launcherSocket(t *testing.T, network, addr string) (*os.File, uint64, string) {
	t.Helper()
	var f *os.File
	var err error
	var local string
	switch network {
	case "udp":
		var pc net.PacketConn
		if pc, err = net.ListenPacket(network, addr); err != nil {
			t.Fatal(err)
		}
		local = pc.LocalAddr().String()
		f, err = pc.(*net.UDPConn).File()
		pc.Close()
	default:
		var ln net.Listener
		if ln, err = net.Listen(network, addr); err != nil {
			t.Fatal(err)
		}
		if ul, ok := ln.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		local = ln.Addr().String()
		f, err = ln.(interface{ File() (*os.File, error) }).File()
		ln.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return f, st.Ino, local
}

// TestSocketActivation runs the relay as systemd's socket activation
// does: a launcher binds TCP, Unix and UDP sockets and execs the relay
// with them. The relay serves clients on those sockets, and binds none
// of its own: each address is held by one socket, the launcher's, which
// the relay's descriptors hold.
func TestSocketActivation(t *testing.T) {
	tcpBack := echoServer(t, "tcp", "127.0.0.1:0")
	udpBack := udpEchoServer(t)
	tf, tino, taddr := launcherSocket(t, "tcp", "127.0.0.1:0")
	upath := filepath.Join(t.TempDir(), "relay.sock")
	uf, uino, _ := launcherSocket(t, "unix", upath)
	df, dino, daddr := launcherSocket(t, "udp", "127.0.0.1:0")
	conf := writeConfig(t, `
routes:
  - name: tcp
    listen: tcp://%s
    target: tcp://%s
  - name: unix
    listen: unix://%s
    target: tcp://%s
  - name: udp
    listen: udp://%s
    target: udp://%s
`, taddr, tcpBack.Addr(), upath, tcpBack.Addr(), daddr, udpBack.LocalAddr())
	files := []*os.File{tf, uf, df}
	p := launchCmd(t, activation(files, "zeroio-relay.socket:zeroio-relay.socket:zeroio-relay.socket"), activator, 3,
		"--log-format", "json", "-c", conf)
	for _, f := range files {
		f.Close() // the relay's copies are the only ones now
	}
	if n := len(p.logs("inherited sockets")); n != 1 {
		t.Errorf("logged %q %d times, want once", "inherited sockets", n)
	}
	for _, c := range []struct{ network, addr string }{{"tcp", taddr}, {"unix", upath}} {
		conn, err := net.DialTimeout(c.network, c.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(conn, 1<<20, 1); err != nil {
			t.Errorf("%s: %v", c.network, err)
		}
		conn.Close()
	}
	uc, err := net.Dial("udp", daddr)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	if _, err := uc.Write([]byte("over the inherited socket")); err != nil {
		t.Fatal(err)
	}
	if n, err := uc.Read(buf); err != nil || string(buf[:n]) != "over the inherited socket" {
		t.Errorf("udp echo %q, %v", buf[:n], err)
	}

	held := socketInodes(t, p.cmd.Process.Pid)
	_, tport, _ := net.SplitHostPort(taddr)
	_, dport, _ := net.SplitHostPort(daddr)
	for _, c := range []struct {
		what string
		ino  uint64
		all  []uint64
	}{
		{"tcp " + taddr, tino, boundInodes(t, "/proc/net/tcp", tport, "0A")},
		{"unix " + upath, uino, unixListeners(t, upath)},
		{"udp " + daddr, dino, boundInodes(t, "/proc/net/udp", dport, "")},
	} {
		if len(c.all) != 1 || c.all[0] != c.ino {
			t.Errorf("%s: sockets bound %v, want only the launcher's %d", c.what, c.all, c.ino)
		}
		if !held[c.ino] {
			t.Errorf("%s: the relay holds no descriptor of the launcher's socket %d", c.what, c.ino)
		}
	}
}

// TestSocketActivationUnclaimed checks that a socket no route uses is a
// start-up error naming it.
func TestSocketActivationUnclaimed(t *testing.T) {
	back := echoServer(t, "tcp", "127.0.0.1:0")
	tf, _, taddr := launcherSocket(t, "tcp", "127.0.0.1:0")
	xf, _, xaddr := launcherSocket(t, "tcp", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(activator, binary, "relay", "tcp://"+taddr, "tcp://"+back.Addr().String())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	activation([]*os.File{tf, xf}, "web:extra")(cmd)
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf(`fd 4 "extra" (tcp %s)`, xaddr)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("relay with an unclaimed socket: %v\n%s\nwant an error naming %s", err, out, want)
	}
}

// socketInodes returns the inodes of the sockets process pid holds.
func socketInodes(t *testing.T, pid int) map[uint64]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if s, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				m[n] = true
			}
		}
	}
	return m
}

// boundInodes returns the inodes of the sockets of a /proc/net table
// (tcp, udp) bound to port, in state st if not "" (0A: TCP_LISTEN).
func boundInodes(t *testing.T, table, port, st string) []uint64 {
	t.Helper()
	b, err := os.ReadFile(table)
	if err != nil {
		t.Skipf("reading %s: %v", table, err)
	}
	p, _ := strconv.Atoi(port)
	suffix := fmt.Sprintf(":%04X", p)
	var inos []uint64
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasSuffix(f[1], suffix) || (st != "" && f[3] != st) {
			continue
		}
		n, _ := strconv.ParseUint(f[9], 10, 64)
		inos = append(inos, n)
	}
	return inos
}

// unixListeners returns the inodes of the listening Unix sockets bound to
// path (/proc/net/unix, flag __SO_ACCEPTCON).
func unixListeners(t *testing.T, path string) []uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Skipf("reading /proc/net/unix: %v", err)
	}
	var inos []uint64
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 || f[7] != path || f[3] != "00010000" {
			continue
		}
		n, _ := strconv.ParseUint(f[6], 10, 64)
		inos = append(inos, n)
	}
	return inos
}

// TestSystemdUnits checks the unit files of docs/systemd with systemd's
// own checker, the relay binary standing in for the installed one.
func TestSystemdUnits(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	var units []string
	for _, name := range []string{"zeroio-relay.socket", "zeroio-relay.service"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.ReplaceAll(string(b), "/usr/local/bin/zeroio", binary))
		units = append(units, filepath.Join(dir, name))
		if err := os.WriteFile(units[len(units)-1], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("systemd-analyze", append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdSocketActivate runs the relay under systemd's own launcher,
// systemd-socket-activate(1), which binds the port and passes it.
func TestSystemdSocketActivate(t *testing.T) {
	if _, err := exec.LookPath("systemd-socket-activate"); err != nil {
		t.Skip("systemd-socket-activate not installed")
	}
	back := echoServer(t, "tcp", "127.0.0.1:0")
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	// The launcher binds, and starts the relay when the first client
	// connects: that client waits in the socket's queue meanwhile.
	p := launch(t, []string{"systemd-socket-activate", "-l", addr, "--fdname=zeroio"}, 0,
		"--log-format", "json", "tcp://"+addr, "tcp://"+back.Addr().String())
	var c net.Conn
	deadline := time.Now().Add(15 * time.Second)
	for c == nil {
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			c = nil
			select {
			case <-p.update:
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	defer c.Close()
	if err := roundTrip(c, 1<<16, 2); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "inherited sockets", 1)
}
