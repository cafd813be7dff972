//go:build !unix

package udp

// msgTrunc is 0 where recvmsg has no such flag; on windows a datagram larger than the buffer makes
// the read fail with WSAEMSGSIZE instead (see WSARecvFrom).
const msgTrunc = 0
