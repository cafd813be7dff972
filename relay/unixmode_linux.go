package relay

import (
	"os"
	"syscall"
)

// setSocketMode sets the mode of a socket's inode, which Linux's bind(2)
// gives the file it creates (less the umask).
func setSocketMode(c syscall.RawConn, mode os.FileMode) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = syscall.Fchmod(int(fd), uint32(mode)) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("fchmod", err)
	}
	return nil
}
