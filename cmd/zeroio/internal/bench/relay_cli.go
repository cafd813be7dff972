package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// ZeroioCommand is the path of a zeroio executable whose `relay`
// subcommand the HTTP and TLS suites run as the relay under test, the
// program users deploy rather than package relay re-entered here. zeroio
// bench sets it to its own executable; this package's tests build one.
// Empty: those cells skip.
var ZeroioCommand string

// zeroioEngines lists the engines `zeroio relay --engine` accepts, nil if
// the command has no such flag. Asked once per process.
var zeroioEngines = sync.OnceValue(func() []string {
	if ZeroioCommand == "" {
		return nil
	}
	help, _ := exec.Command(ZeroioCommand, "relay", "--help").Output()
	if !bytes.Contains(help, []byte("-engine")) {
		return nil
	}
	var out []string
	for _, e := range []string{"event", "goroutine"} {
		// --check-config parses and validates, and neither listens
		// nor dials.
		err := exec.Command(ZeroioCommand, "relay", "--engine", e, "--check-config",
			"tcp://127.0.0.1:0", "tcp://127.0.0.1:1").Run()
		if err == nil {
			out = append(out, e)
		}
	}
	return out
})

// zeroioImpls are the cells of zeroio in a suite: the default engine, and
// at scales above Quick one per engine when the command can choose.
func zeroioImpls(sc Scale) []string {
	impls := []string{"zeroio"}
	if sc > Quick {
		for _, e := range zeroioEngines() {
			impls = append(impls, "zeroio-"+e)
		}
	}
	return impls
}

// skipWithoutZeroio skips b, a zeroio cell, when there is no zeroio
// executable to run.
func skipWithoutZeroio(b *testing.B, impl string) {
	if strings.HasPrefix(impl, "zeroio") && ZeroioCommand == "" {
		skip(b, "no zeroio executable to run (zeroio bench runs itself; go test builds one or takes $ZEROIO_COMMAND)")
	}
}

// startZeroio runs `zeroio relay` with args (listen and target, or -c
// FILE) until stop, and returns once listen accepts connections. impl is
// "zeroio" or "zeroio-ENGINE".
func startZeroio(impl, listen string, args ...string) (*relayProc, error) {
	return startZeroioUntil(impl, listen, func(exited <-chan struct{}) bool { return waitListenOrExit(listen, exited) }, args...)
}

// startZeroioUntil is startZeroio returning once ready (given the channel
// closed when the relay exits) reports true: for a UDP listen address,
// which cannot be dialled to see whether it is open.
func startZeroioUntil(impl, listen string, ready func(exited <-chan struct{}) bool, args ...string) (*relayProc, error) {
	if ZeroioCommand == "" {
		return nil, errors.New("no zeroio executable to run (bench.ZeroioCommand is unset)")
	}
	all := []string{"relay", "--log-level", "warn", "--shutdown-timeout", "0"}
	if e, ok := strings.CutPrefix(impl, "zeroio-"); ok {
		all = append(all, "--engine", e)
	}
	cmd := exec.Command(ZeroioCommand, append(all, args...)...)
	// Kept for an error message: the relay logs a line per failure.
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	ownGroup(cmd)
	exited, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, addr: listen, exited: exited}
	if !ready(exited) {
		p.stop()
		return nil, fmt.Errorf("zeroio relay %s did not listen on %s: %s", strings.Join(args, " "), listen, stderr)
	}
	return p, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ReplaceAll(string(t.b), "\n", "; "))
}
