// Package sdnotify tells a service manager about the process's state with
// the sd_notify protocol: one datagram of newline-separated KEY=VALUE lines
// to the Unix socket named by NOTIFY_SOCKET (sd_notify(3)). It has no
// dependency on libsystemd; when NOTIFY_SOCKET is unset every call does
// nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// The states systemd understands (sd_notify(3)).
const (
	Ready     = "READY=1"
	Reloading = "RELOADING=1"
	Stopping  = "STOPPING=1"
)

// MainPID returns the line that names pid as the service's main process,
// which a process that replaced the one systemd started sends so systemd
// follows it.
func MainPID(pid int) string { return fmt.Sprintf("MAINPID=%d", pid) }

// Status returns a free-form status line shown by systemctl status.
func Status(s string) string { return "STATUS=" + strings.ReplaceAll(s, "\n", " ") }

// MonotonicUsec returns the MONOTONIC_USEC= line that systemd (253 and
// later) requires beside RELOADING=1 to order the reload's start against
// its end.
func MonotonicUsec() string {
	return fmt.Sprintf("MONOTONIC_USEC=%d", monotonicUsec())
}

// Socket returns the address in NOTIFY_SOCKET, or "" when no service
// manager listens. A leading '@' names a Linux abstract socket.
func Socket() string { return os.Getenv("NOTIFY_SOCKET") }

// Notify sends lines as one datagram to NOTIFY_SOCKET. It does nothing and
// returns nil when NOTIFY_SOCKET is unset.
func Notify(lines ...string) error {
	addr := Socket()
	if addr == "" {
		return nil
	}
	if len(lines) == 0 {
		return errors.New("sdnotify: nothing to send")
	}
	name := addr
	if name[0] == '@' {
		name = "\x00" + name[1:]
	} else if name[0] != '/' {
		return fmt.Errorf("sdnotify: NOTIFY_SOCKET %q is neither a path nor an abstract socket", addr)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}
