package udp

import (
	"errors"
	"syscall"
)

// syscallError returns err as it is: Plan 9's system calls fail with
// strings (syscall.ErrorString), not errnos to wrap.
func syscallError(call string, err error) error { return err }

// gsoRefused reports the errors after which a GSO send is retried
// unsegmented. Plan 9 has no GSO, and package syscall no EMSGSIZE there;
// the rest is kept so that writeGroups behaves, and tests, as elsewhere.
func gsoRefused(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL)
}
