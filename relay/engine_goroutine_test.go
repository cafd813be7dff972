package relay

import (
	"net"
	"syscall"
)

// What tests ask of the goroutine engine (see testEngine).

// inFlight lists the connections in flight; s.mu is held.
func (e *goroutineEngine) inFlight() []connInfo {
	var cs []connInfo
	for p := range e.conns {
		p.mu.Lock()
		ci := connInfo{client: fdOf(p.client), target: -1, dialing: p.cancel != nil && p.target == nil}
		if p.target != nil {
			ci.target = fdOf(p.target)
		}
		p.mu.Unlock()
		cs = append(cs, ci)
	}
	return cs
}

// holding is not known here: the copies' pipes and buffers are package
// splice's (splice.ReadStats).
func (e *goroutineEngine) holding() (bufs, pipes, pipesTaken int64, ok bool) { return 0, 0, 0, false }

// fdOf returns c's descriptor, or -1.
func fdOf(c net.Conn) int {
	fd := -1
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(f uintptr) { fd = int(f) })
		}
	}
	return fd
}
