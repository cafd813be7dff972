//go:build unix

package relay

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkListening returns an error if ln, made from a file, is a stream
// socket that does not listen: a connection, as systemd passes with
// Accept=yes (SO_ACCEPTCONN, socket(7)).
func checkListening(ln net.Listener) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN) }); err != nil {
		return err
	}
	if serr == nil && v == 0 {
		return errors.New("a stream socket that does not listen")
	}
	return nil
}
