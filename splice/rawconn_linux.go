package splice

import (
	"net"
	"os"
	"syscall"
)

// The helpers below reach a descriptor through syscall.RawConn. For the
// concrete types the SyscallConn call and the RawConn method inline and
// devirtualize, so the RawConn stays on the stack: no allocation per call.
// Other types (reached only through an [Unwrapper]) go through the
// interface and allocate.

// rawRead runs f under v's read lock, waiting in the netpoller for
// readability (and honouring the read deadline) each time f returns false.
func rawRead(v any, f func(fd uintptr) bool) error {
	switch c := v.(type) {
	case *net.TCPConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Read(f)
	case *net.UnixConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Read(f)
	case *os.File:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Read(f)
	case syscall.Conn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Read(f)
	}
	return syscall.EINVAL
}

// rawWrite runs f under v's write lock, waiting for writability (and
// honouring the write deadline) each time f returns false.
func rawWrite(v any, f func(fd uintptr) bool) error {
	switch c := v.(type) {
	case *net.TCPConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Write(f)
	case *net.UnixConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Write(f)
	case *os.File:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Write(f)
	case syscall.Conn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Write(f)
	}
	return syscall.EINVAL
}

// rawControl runs f with v's descriptor held open, without a lock.
func rawControl(v any, f func(fd uintptr)) error {
	switch c := v.(type) {
	case *net.TCPConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Control(f)
	case *net.UnixConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Control(f)
	case *os.File:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Control(f)
	case syscall.Conn:
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return rc.Control(f)
	}
	return syscall.EINVAL
}
