package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pidFile is --pid-file: a file that names the process serving the
// relay, written whole or not at all (a temporary file renamed over it),
// so that a reader never sees it empty or half written. A nil *pidFile
// (no --pid-file) does nothing.
type pidFile struct {
	path, tmp string
}

// preparePidFile writes this process's pid to a temporary file beside
// path: a directory that cannot be written fails here, before the relay
// listens or takes over anything. commit puts it in place.
func preparePidFile(path string) (*pidFile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("pid file: %w", err)
	}
	p := &pidFile{path: path, tmp: f.Name()}
	_, err = fmt.Fprintf(f, "%d\n", os.Getpid())
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		p.discard()
		return nil, fmt.Errorf("pid file: %w", err)
	}
	return p, nil
}

// commit renames the temporary file over the pid file.
func (p *pidFile) commit() error {
	if p == nil {
		return nil
	}
	if err := os.Rename(p.tmp, p.path); err != nil {
		p.discard()
		return fmt.Errorf("pid file: %w", err)
	}
	p.tmp = ""
	return nil
}

// discard removes the temporary file of a pid file not committed.
func (p *pidFile) discard() {
	if p != nil && p.tmp != "" {
		os.Remove(p.tmp)
		p.tmp = ""
	}
}

// remove deletes the pid file at exit if it still names this process: a
// process that handed the relay over to a new one leaves the new one's
// pid file in place.
func (p *pidFile) remove() {
	if p == nil {
		return
	}
	p.discard()
	if pid, err := readPidFile(p.path); err == nil && pid == os.Getpid() {
		os.Remove(p.path)
	}
}

// readPidFile returns the pid a pid file names.
func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", path, b)
	}
	return pid, nil
}
