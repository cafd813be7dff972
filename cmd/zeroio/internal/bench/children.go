package bench

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"
)

// The peers that run in a process group of their own (nginx, HAProxy,
// socat, zeroio relay) and the iperf3 server outlive zeroio bench if it
// dies without stopping them: an interrupted run would leave them
// listening, and their temporary directories behind. Every such child is
// started through startChild, so that [StopAll] can end those still
// running.
var children struct {
	sync.Mutex
	cmds map[*exec.Cmd]bool
	dirs map[string]bool
	// stopping: StopAll ran, and zeroio bench is about to exit; a case
	// still running must start nothing that would outlive it.
	stopping bool
}

var errStopping = errors.New("zeroio bench is stopping")

// startChild starts cmd and returns a channel closed once it has exited
// and been waited for. Until then StopAll kills it (its process group if
// ownGroup put it in one).
func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	children.Lock()
	defer children.Unlock()
	if children.stopping {
		return nil, errStopping
	}
	// A child's own children (socat forks one per client) inherit the
	// pipe its stderr is copied from, and Wait waits for that copy to
	// end: with WaitDelay it returns once the child has exited and the
	// delay is over, whoever still holds the pipe (os/exec: Cmd.WaitDelay).
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = time.Second
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if children.cmds == nil {
		children.cmds = map[*exec.Cmd]bool{}
	}
	children.cmds[cmd] = true
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		children.Lock()
		delete(children.cmds, cmd)
		children.Unlock()
		close(exited)
	}()
	return exited, nil
}

// tempDir makes a temporary directory in parent (os.TempDir() if "")
// that StopAll removes unless removeTempDir did first.
func tempDir(parent, pattern string) (string, error) {
	children.Lock()
	defer children.Unlock()
	if children.stopping {
		return "", errStopping
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if children.dirs == nil {
		children.dirs = map[string]bool{}
	}
	children.dirs[dir] = true
	return dir, nil
}

func removeTempDir(dir string) {
	os.RemoveAll(dir)
	children.Lock()
	delete(children.dirs, dir)
	children.Unlock()
}

// StopAll kills every child started through startChild that is still
// running, with its process group, and removes the temporary directories
// still in use: for zeroio bench to call when it is interrupted, before
// it exits. After it, startChild and tempDir fail, so that a case still
// running starts nothing that would outlive zeroio bench.
func StopAll() {
	children.Lock()
	defer children.Unlock()
	children.stopping = true
	for cmd := range children.cmds {
		if inOwnGroup(cmd) {
			killGroup(cmd, true)
		}
		cmd.Process.Kill()
	}
	for dir := range children.dirs {
		os.RemoveAll(dir)
	}
	clear(children.dirs)
}
