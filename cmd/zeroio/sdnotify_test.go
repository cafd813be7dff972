package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServiceNotifications runs the relay under a stand-in for systemd's
// notification socket and checks what it says: READY=1 once it serves,
// RELOADING=1 (with MONOTONIC_USEC) then READY=1 around each SIGHUP,
// with a STATUS= saying whether the reload failed, and STOPPING=1 at
// shutdown.
func TestServiceNotifications(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Skipf("unixgram: %v", err)
	}
	defer ln.Close()
	next := func(want ...string) string {
		t.Helper()
		buf := make([]byte, 4096)
		ln.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		msg := string(buf[:n])
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Fatalf("notification %q, want %q in it", msg, w)
			}
		}
		return msg
	}
	back := echoServer(t, "tcp", "127.0.0.1:0")
	route := "routes:\n  - name: r\n    listen: tcp://127.0.0.1:0\n    target: tcp://" + back.Addr().String() + "\n"
	conf := writeConfig(t, "%s", route)
	p := launchCmd(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock) }, nil, 1,
		"--log-format", "json", "-c", conf)
	next("READY=1")

	p.cmd.Process.Signal(syscall.SIGHUP)
	next("RELOADING=1", "MONOTONIC_USEC=")
	next("READY=1", "STATUS=serving; reloaded")

	os.WriteFile(conf, []byte("routes: [oops"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	next("RELOADING=1")
	next("READY=1", "STATUS=serving; reload failed")

	p.cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	if err := p.wait(t, 15*time.Second); err != nil {
		t.Fatalf("relay exited: %v", err)
	}
}
