package relay

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A loop waits for events in Go's netpoller, not in a blocking
// epoll_wait(2). Its epoll instance is itself pollable (it is readable
// while events are ready), so the loop polls it without blocking
// (epoll_wait with a zero timeout, a raw call) and, when nothing is
// ready, parks on it as on any socket of package net, with a read
// deadline for the next timer. A blocking epoll_wait would be a system
// call in progress, each one a P that the runtime's sysmon thread must
// notice and take back; loops that wake and sleep at every burst keep
// sysmon at its shortest polling interval (runtime/proc.go, sysmon's
// delay resets whenever retake takes a P), a cost per wake-up that shows
// in profiles as sysmon's nanosleep. Parked in the netpoller, the loop
// holds no thread, and sysmon backs off.

// epollWait is epoll_wait(2) with a zero timeout: it never blocks.
func epollWait(epfd int, events []unix.EpollEvent) int {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0 // EINTR
	}
	return int(n)
}

// epollCtl is epoll_ctl(2), which does not block either.
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	return e
}

// poller is the loop's epoll descriptor as package os sees it, to park
// on.
type poller struct {
	f        *os.File
	rc       syscall.RawConn
	fn       func(uintptr) bool // l.pollOnce, bound once: no allocation per wait
	deadline bool               // a read deadline is set
}

// initPoller makes l's epoll descriptor non-blocking (which its polling
// ignores) so that package os registers it with the netpoller.
func (l *loop) initPoller() error {
	if err := unix.SetNonblock(l.epfd, true); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	l.poll.f = os.NewFile(uintptr(l.epfd), "epoll")
	rc, err := l.poll.f.SyscallConn()
	if err != nil {
		return err
	}
	l.poll.rc, l.poll.fn = rc, l.pollOnce
	return nil
}

func (l *loop) pollOnce(uintptr) bool {
	l.ready = epollWait(l.epfd, l.events[:])
	return l.ready > 0
}

// wait returns the number of events ready in l.events, parking for up to
// timeout milliseconds (-1: until an event) when none is.
func (l *loop) wait(timeout int) int {
	if n := epollWait(l.epfd, l.events[:]); n > 0 || timeout == 0 {
		return n
	}
	p := &l.poll
	switch {
	case timeout > 0:
		p.f.SetReadDeadline(time.Now().Add(time.Duration(timeout) * time.Millisecond))
		p.deadline = true
	case p.deadline:
		p.f.SetReadDeadline(time.Time{})
		p.deadline = false
	}
	l.ready = 0
	p.rc.Read(p.fn) // returns at an event, or at the deadline with none
	return l.ready
}
