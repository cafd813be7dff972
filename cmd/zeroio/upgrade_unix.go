//go:build unix

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// upgradeSignal upgrades the relay: nginx's convention.
var upgradeSignal os.Signal = syscall.SIGUSR2

// startNew starts exe with this process's arguments and environment for
// an upgrade, passing it one end of a new socket pair for the hand-over,
// the write end of a pipe to say it serves, and the listeners in aux
// (the metrics and pprof servers'), which it serves from then on.
func startNew(exe string, aux []auxListener) (*newProcess, error) {
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	defer theirs.Close()
	ready, readyW, err := os.Pipe()
	if err != nil {
		mine.Close()
		return nil, err
	}
	defer readyW.Close()
	files := []*os.File{theirs, readyW} // fds 3 and 4 of the new process
	defer func() {
		for _, f := range files[2:] {
			f.Close()
		}
	}()
	var named []string
	for _, a := range aux {
		f, err := a.ln.(interface{ File() (*os.File, error) }).File()
		if err != nil {
			mine.Close()
			ready.Close()
			return nil, fmt.Errorf("%s listener: %w", a.name, err)
		}
		files = append(files, f)
		named = append(named, fmt.Sprintf("%s:%d", a.name, 2+len(files)))
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = exe
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = files
	cmd.Env = append(upgradeEnv(os.Environ()),
		envUpgradeFD+"=3", envUpgradeReady+"=4", envUpgradeListeners+"="+strings.Join(named, ","))
	if err := cmd.Start(); err != nil {
		mine.Close()
		ready.Close()
		return nil, err
	}
	p := &newProcess{cmd: cmd, conn: mine, ready: ready, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// socketPair returns the two ends of a connected Unix stream socket
// pair: this process's, as a *net.UnixConn, and the new process's.
func socketPair() (*net.UnixConn, *os.File, error) {
	// As the net package does where SOCK_CLOEXEC is missing (darwin):
	// no exec between socketpair and the flag.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[0]), "upgrade")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "upgrade"), nil
}
