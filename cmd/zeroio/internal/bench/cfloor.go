package bench

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// cfloorSource is a minimal epoll relay in C (see the file's comment): the
// floor of the HTTP suite, impl=c-floor. What it costs is close to the
// kernel's share of relaying; what any relay spends above it is its own.
//
//go:embed testdata/cfloor/relay.c
var cfloorSource []byte

// cfloorWhyNot says why the C floor cannot run here, "" if it can.
func cfloorWhyNot() string {
	if runtime.GOOS != "linux" {
		return "linux only (epoll)"
	}
	if _, err := exec.LookPath("cc"); err != nil {
		return "no C compiler: cc not on PATH"
	}
	return ""
}

// cfloorBinary compiles the floor once per process with cc -O2, into the
// user's cache directory (named by the source's hash, so an edit
// rebuilds and a rerun does not), or a temporary one.
var cfloorBinary = sync.OnceValues(func() (string, error) {
	if why := cfloorWhyNot(); why != "" {
		return "", fmt.Errorf("c-floor: %s", why)
	}
	sum := sha256.Sum256(cfloorSource)
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "zeroio-bench")
	exe := filepath.Join(dir, "cfloor-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(exe); err == nil {
		return exe, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("c-floor: %v", err)
	}
	src := exe + ".c"
	if err := os.WriteFile(src, cfloorSource, 0o644); err != nil {
		return "", fmt.Errorf("c-floor: %v", err)
	}
	defer os.Remove(src)
	tmp := fmt.Sprintf("%s.%d.tmp", exe, os.Getpid())
	if out, err := exec.Command("cc", "-O2", "-pthread", "-o", tmp, src).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("c-floor: cc -O2: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Renamed into place whole: a concurrent run never sees half a file.
	if err := os.Rename(tmp, exe); err != nil {
		return "", fmt.Errorf("c-floor: %v", err)
	}
	return exe, nil
})

// startCFloor runs the C floor relaying to target (host:port, IPv4), one
// event loop per CPU as HAProxy's default is a thread per CPU, until stop.
func startCFloor(target string) (*relayProc, error) {
	exe, err := cfloorBinary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "127.0.0.1:0", target, strconv.Itoa(runtime.NumCPU()))
	return startListenChild(cmd, "c-floor")
}
