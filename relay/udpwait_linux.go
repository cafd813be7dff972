package relay

import "golang.org/x/sys/unix"

// waitReadable blocks until the upstream socket has a datagram (or the
// read deadline passes) without holding a buffer, so an idle session
// keeps no memory but its socket and goroutine.
//
// The callback must look before declining: RawConn.Read resets the
// poller's readiness before the first call (internal/poll prepareRead),
// and with edge-triggered epoll a datagram that arrived earlier would
// never wake the wait. poll(2) with a zero timeout checks the queue.
func (s *session) waitReadable() error {
	return s.rc.Read(func(fd uintptr) bool {
		p := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p[:], 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
}
