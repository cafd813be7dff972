package nbsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2) of a non-blocking socket, such as one of package net.
func Read(fd uintptr, p []byte) (int, unix.Errno) { return rw(unix.SYS_READ, fd, p) }

// Write is write(2) of a non-blocking socket.
func Write(fd uintptr, p []byte) (int, unix.Errno) { return rw(unix.SYS_WRITE, fd, p) }

func rw(trap, fd uintptr, p []byte) (int, unix.Errno) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(trap, fd, uintptr(base), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Splice is splice(2) between a pipe and a non-blocking descriptor, with
// no offsets; flags should hold SPLICE_F_NONBLOCK so that the pipe side
// cannot block either.
func Splice(rfd, wfd uintptr, n int, flags int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, rfd, 0, wfd, 0, uintptr(n), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}
