package nbsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2) of a non-blocking socket, such as one of package net.
func Read(fd uintptr, p []byte) (int, unix.Errno) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(base), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}
