//go:build unix

package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeFrame sends one frame, its descriptors with its first bytes
// (SCM_RIGHTS, unix(7)); a stream socket may take the rest in further
// writes.
func writeFrame(c *net.UnixConn, typ uint8, payload []byte, fds []int) error {
	b := appendFrameHeader(make([]byte, 0, frameHeaderLen+len(payload)), typ, len(payload), len(fds))
	b = append(b, payload...)
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n < len(b) {
		_, err = c.Write(b[n:])
	}
	return err
}

// readFrame reads one frame and the descriptors it carries. On an error
// it has closed every descriptor it received.
func readFrame(c *net.UnixConn) (frameHeader, []byte, []int, error) {
	var hb [frameHeaderLen]byte
	oob := make([]byte, syscall.CmsgSpace(4*maxFrameFDs))
	fds, err := readFDs(c, hb[:], oob, nil)
	var h frameHeader
	if err == nil {
		h, err = parseFrameHeader(hb[:])
	}
	var p []byte
	if err == nil {
		p = make([]byte, h.n)
		fds, err = readFDs(c, p, oob, fds)
	}
	if err == nil && len(fds) != h.nfds {
		err = fmt.Errorf("%w: %d descriptors announced, %d received", errBadFrame, h.nfds, len(fds))
	}
	if err != nil {
		closeFDs(fds)
		return h, nil, nil, err
	}
	return h, p, fds, nil
}

// readFDs fills b from c, adding the descriptors that come with its bytes
// to fds. Descriptors the kernel had to drop for lack of room (MSG_CTRUNC)
// fail the read.
func readFDs(c *net.UnixConn, b, oob []byte, fds []int) ([]int, error) {
	for got := 0; got < len(b); {
		n, oobn, flags, _, err := c.ReadMsgUnix(b[got:], oob)
		if oobn > 0 {
			msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn])
			for i := range msgs {
				if rights, e := syscall.ParseUnixRights(&msgs[i]); e == nil {
					fds = append(fds, rights...)
				}
			}
			if perr != nil && err == nil {
				err = perr
			}
		}
		if flags&syscall.MSG_CTRUNC != 0 && err == nil {
			err = fmt.Errorf("%w: descriptors cut off", errBadFrame)
		}
		if err != nil {
			return fds, err
		}
		if n == 0 {
			return fds, io.ErrUnexpectedEOF
		}
		got += n
	}
	return fds, nil
}

// udpConnOf wraps fd, a UDP socket received, for package net; fd is
// closed either way.
func udpConnOf(fd int) (*net.UDPConn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, errors.New("received a socket that is not UDP")
	}
	return uc, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// rawFD returns a duplicate of the descriptor behind x (a listener or a
// socket), which the caller closes.
func rawFD(x any) (int, error) {
	var ctl func(func(uintptr)) error
	switch v := x.(type) {
	case interface{ Control(func(uintptr)) error }: // udp.Conn, leaving GRO as it is
		ctl = v.Control
	case syscall.Conn:
		rc, err := v.SyscallConn()
		if err != nil {
			return -1, err
		}
		ctl = rc.Control
	default:
		return -1, errors.New("socket has no descriptor")
	}
	fd := -1
	var ferr error
	if err := ctl(func(f uintptr) { fd, ferr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if ferr != nil {
		return -1, os.NewSyscallError("fcntl", ferr)
	}
	return fd, nil
}
