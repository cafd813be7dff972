//go:build unix

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START,
// sd_listen_fds(3)).
const listenFDsStart = 3

// listenFDs returns the sockets a service manager passed to this process
// under the socket activation protocol (sd_listen_fds(3)): LISTEN_FDS
// descriptors from 3 on, meant for the process whose pid LISTEN_PID
// names, with the names of LISTEN_FDNAMES (colon-separated). It unsets the
// three variables, so that children do not take the sockets for theirs,
// and marks the descriptors close-on-exec. None passed, or passed to
// another process, is no socket and no error.
func listenFDs() ([]*os.File, []string, error) {
	pid, fds, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if fds == "" || pid != strconv.Itoa(os.Getpid()) {
		return nil, nil, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 || n > 1<<16 {
		return nil, nil, fmt.Errorf("LISTEN_FDS=%q: want a number of descriptors", fds)
	}
	var ns []string
	if names != "" {
		ns = strings.Split(names, ":")
	}
	files := make([]*os.File, n)
	for i := range files {
		fd := listenFDsStart + i
		syscall.CloseOnExec(fd)
		name := "LISTEN_FD_" + strconv.Itoa(fd)
		if i < len(ns) && ns[i] != "" {
			name = ns[i]
		}
		files[i] = os.NewFile(uintptr(fd), name)
	}
	return files, ns, nil
}
