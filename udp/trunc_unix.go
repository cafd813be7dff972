//go:build unix

package udp

import "syscall"

// msgTrunc is the recvmsg flag for a truncated datagram.
const msgTrunc = syscall.MSG_TRUNC
