//go:build unix

package bench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An interrupted zeroio bench calls StopAll: a peer in a process group of
// its own (nginx's master and worker, here a shell and the sleep it
// forked) must die whole, and its temporary directory go, or they outlive
// the bench.
func TestStopAllEndsPeers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups: linux only")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir, err := tempDir("", "zeroio-stopall-*")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30")
	ownGroup(cmd)
	exited, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	stopAll(t)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer still runs after StopAll")
	}
	// The forked sleep, alone in the group now, goes with it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatalf("the peer's process group is still alive after StopAll (kill -0: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		os.RemoveAll(dir)
		t.Errorf("StopAll left %s behind: %v", dir, err)
	}
	// A case still running when the bench is interrupted starts no new
	// peer: it would outlive the bench, which exits right after StopAll.
	late := exec.Command("sleep", "30")
	if _, err := startChild(late); err == nil {
		late.Process.Kill()
		late.Wait()
		t.Error("startChild after StopAll started a child")
	}
	if dir, err := tempDir("", "zeroio-stopall-*"); err == nil {
		os.RemoveAll(dir)
		t.Error("tempDir after StopAll made a directory")
	}
}

// A system user (su nobody: HOME=/nonexistent) has no cache directory:
// the C floors are built in a directory of the user's own in TMPDIR
// instead of being skipped, and never in one others can write to.
func TestCBuildDirWithoutHome(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", filepath.Join(notDir, "home")) // unusable, even by root
	t.Setenv("XDG_CACHE_HOME", "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir, err := cBuildDir()
	want := filepath.Join(tmp, fmt.Sprintf("zeroio-bench-%d", os.Getuid()))
	if err != nil || dir != want {
		t.Fatalf("cBuildDir() = %q, %v; want %q", dir, err, want)
	}
	if err := os.Chmod(want, 0o777); err != nil {
		t.Fatal(err)
	}
	if dir, err := cBuildDir(); err == nil {
		t.Errorf("cBuildDir() = %q with a world-writable directory; want an error", dir)
	}
}

// A HAProxy that refuses its configuration exits at once with an alert
// on stderr: the case fails at once, saying what HAProxy said, not after
// two seconds with "did not listen" alone.
func TestStartRelayProcSaysWhy(t *testing.T) {
	bin := t.TempDir()
	fake := "#!/bin/sh\necho '[ALERT] config : parsing error' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "haproxy"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	p, err := startRelayProc("haproxy", "tcp://127.0.0.1:1")
	if err == nil {
		p.stop()
		t.Fatal("startRelayProc with a haproxy that exits at once: no error")
	}
	if !strings.Contains(err.Error(), "parsing error") {
		t.Errorf("error %q does not say what haproxy said", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v to notice haproxy had exited", d)
	}
}

// Under a low open-file limit (ulimit -n 1024) the idle cases skip,
// saying so, instead of running out of descriptors and waiting out a
// 30 s deadline per connection the backend never accepted.
func TestRelayIdleSkipsUnderLowFDLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	saved := rl
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved)
	rl.Cur = min(1024, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	for _, impl := range []string{"zeroio", "iocopy"} {
		if why := idleFDShortage(impl, 500); !strings.Contains(why, "ulimit -n") {
			t.Errorf("%s, 500 connections, limit %d: %q, want a skip naming ulimit -n", impl, rl.Cur, why)
		}
	}
	if why := idleFDShortage("iocopy", 100); why != "" {
		t.Errorf("iocopy, 100 connections, limit %d: %q, want none", rl.Cur, why)
	}
}

// Under ulimit -n 1024 HAProxy with maxconn 6000 refused to start
// ("Cannot raise FD limit to 15017"), failing every haproxy case: its
// maxconn now fits the limit, and it starts.
func TestHAProxyUnderLowFDLimit(t *testing.T) {
	if got := haproxyMaxconn(1<<20, true); got != 6000 {
		t.Errorf("no limit to speak of: maxconn %d, want 6000", got)
	}
	if needTools("haproxy", "sh") != "" {
		t.Skip("haproxy or sh not on PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port, err := freePort("tcp")
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf(haproxyHeadFormat, haproxyMaxconn(1024, true)) +
		fmt.Sprintf("listen relay\n\tbind %s\n\tserver target %s\n", listen, ln.Addr())
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The soft and the hard limit, as ulimit -n sets them.
	cmd := exec.Command("sh", "-c", `ulimit -n 1024 && exec haproxy -db -f "$0"`, file)
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	ownGroup(cmd)
	exited, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p := &relayProc{cmd: cmd, addr: listen, exited: exited}
	defer p.stop()
	if !waitListenOrExit(listen, exited) {
		t.Fatalf("haproxy under ulimit -n 1024 did not listen: %s", stderr)
	}
}
