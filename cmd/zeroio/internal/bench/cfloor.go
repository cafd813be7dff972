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

// uringSource is the same relay on io_uring(7) (see the file's comment),
// impl=uring-floor: an experiment with what a ring instead of one system
// call per step changes, built where liburing is installed.
//
//go:embed testdata/uringfloor/relay.c
var uringSource []byte

// floorHeader is what both include as "../floor.h".
//
//go:embed testdata/floor.h
var floorHeader []byte

// A cProgram is one of the bench's C programs (the relays, the UDP sender
// and receiver), compiled once per process
// with cc -O2 into the user's cache directory (named by the source's
// hash, so an edit rebuilds and a rerun does not), or a temporary one.
type cProgram struct {
	name  string
	src   []byte
	file  string   // the source's name in testdata, relay.c if ""
	libs  []string // linker flags
	probe bool     // the program takes -probe: can it run here?
	build func() (string, error)
}

var (
	cfloor = newCProgram(&cProgram{name: "c-floor", src: cfloorSource}, "cfloor")
	uring  = newCProgram(&cProgram{name: "uring-floor", src: uringSource, libs: []string{"-luring"}, probe: true}, "uringfloor")
)

func newCProgram(p *cProgram, file string) *cProgram {
	p.build = sync.OnceValues(func() (string, error) {
		exe, err := p.compile(file)
		if err == nil && p.probe {
			if out, perr := exec.Command(exe, "-probe").CombinedOutput(); perr != nil {
				return "", fmt.Errorf("%s: %s", p.name, strings.TrimSpace(string(out)))
			}
		}
		return exe, err
	})
	return p
}

// whyNot says why the program cannot run here, "" if it can. It compiles
// the program, so that a missing library is found before a run.
func (p *cProgram) whyNot() string {
	if _, err := p.build(); err != nil {
		return err.Error()
	}
	return ""
}

func (p *cProgram) compile(file string) (string, error) {
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("%s: linux only", p.name)
	}
	if _, err := exec.LookPath("cc"); err != nil {
		return "", fmt.Errorf("%s: no C compiler: cc not on PATH", p.name)
	}
	sum := sha256.Sum256(append(append([]byte(nil), p.src...), floorHeader...))
	dir, err := cBuildDir()
	if err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	exe := filepath.Join(dir, file+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(exe); err == nil {
		return exe, nil
	}
	// The sources as in testdata: the program in a directory of its
	// own, the header beside that directory.
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	defer os.RemoveAll(work)
	name := p.file
	if name == "" {
		name = "relay.c"
	}
	src := filepath.Join(work, file, name)
	if err := os.Mkdir(filepath.Dir(src), 0o755); err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	if err := os.WriteFile(filepath.Join(work, "floor.h"), floorHeader, 0o644); err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	if err := os.WriteFile(src, p.src, 0o644); err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", exe, os.Getpid())
	args := append([]string{"-O2", "-pthread", "-o", tmp, src}, p.libs...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		msg := strings.TrimSpace(string(out))
		if i := strings.IndexByte(msg, '\n'); i > 0 {
			msg = msg[:i]
		}
		return "", fmt.Errorf("%s: cc -O2 %s: %v: %s", p.name, strings.Join(p.libs, " "), err, msg)
	}
	// Renamed into place whole: a concurrent run never sees half a file.
	if err := os.Rename(tmp, exe); err != nil {
		return "", fmt.Errorf("%s: %v", p.name, err)
	}
	return exe, nil
}

// cBuildDir returns the directory the C relays are compiled into: the
// user's cache directory, else, for a user with none that is writable (a
// system user's HOME is /nonexistent), one of the user's own in
// os.TempDir(), used only if no one else can write to it, as what is in
// it is run.
func cBuildDir() (string, error) {
	dir, cacheErr := os.UserCacheDir()
	if cacheErr == nil {
		dir = filepath.Join(dir, "zeroio-bench")
		if cacheErr = os.MkdirAll(dir, 0o755); cacheErr == nil {
			return dir, nil
		}
	}
	tmp := filepath.Join(os.TempDir(), fmt.Sprintf("zeroio-bench-%d", os.Getuid()))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("no cache directory (%v), nor %v", cacheErr, err)
	}
	if fi, err := os.Stat(tmp); err != nil || !ownDir(fi) {
		return "", fmt.Errorf("no cache directory (%v), and %s is not the user's own", cacheErr, tmp)
	}
	return tmp, nil
}

// start runs the program relaying to target (host:port, IPv4), one event
// loop per CPU as HAProxy's default is a thread per CPU, until stop.
func (p *cProgram) start(target string) (*relayProc, error) {
	exe, err := p.build()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "127.0.0.1:0", target, strconv.Itoa(runtime.NumCPU()))
	return startListenChild(cmd, p.name)
}

// cfloorWhyNot says why the C floor cannot run here, "" if it can.
func cfloorWhyNot() string { return cfloor.whyNot() }
