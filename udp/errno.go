//go:build !plan9

package udp

import (
	"errors"
	"os"
	"syscall"
)

// syscallError wraps a raw errno in an *os.SyscallError named after call;
// other errors are returned as they are.
func syscallError(call string, err error) error {
	if errno, ok := err.(syscall.Errno); ok {
		return os.NewSyscallError(call, errno)
	}
	return err
}

// gsoRefused reports the errors after which a GSO send is retried
// unsegmented.
func gsoRefused(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EMSGSIZE)
}
