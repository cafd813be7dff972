package evloop

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Poller is an epoll instance and the eventfd(2) that wakes it, waited
// on by one loop goroutine (Wait) and woken by any other (Notify).
//
// It waits in epoll_wait(2) on a thread of its own, as HAProxy's and
// nginx's threads do, in one of two ways. While it is busy (it had an
// event in the last holdWait) it enters epoll_wait as a raw system call:
// the runtime does not see the call, so the loop's goroutine keeps its P
// while the thread sleeps in the kernel, and an event wakes that thread
// straight into the loop. Once a wait has found nothing for holdWait it
// enters epoll_wait as an ordinary system call, which lets sysmon take
// the P back, and holds only the thread until the next event.
//
// Why not always one or the other: an ordinary system call that blocks
// gives up its P whenever it lasts longer than sysmon's 20 µs, so a loop
// that sleeps and wakes at every burst would have sysmon take its P and
// the loop take it back each time, and keep sysmon at its shortest
// polling interval (runtime/proc.go, retake); a raw call would hold the P
// however long the loop idles.
//
// Nor does a loop park in Go's netpoller. Its epoll instance would then be
// registered in the runtime's (an epoll descriptor is itself pollable),
// and every new readiness on it passes through both instances
// (ep_poll_callback in fs/eventpoll.c). Worse, while any goroutine of the
// program waits in the netpoller, an idle scheduler thread sleeps in the
// runtime's epoll_wait (findRunnable), and each of those events wakes that
// thread for nothing: on connection churn that doubled the relay's
// context switches and cost half as much CPU again per connection.
//
// Holding a P while busy has two consequences, both handled here:
//
//   - Other goroutines must not wait for Ps that busy loops hold: each
//     set of loops raises GOMAXPROCS by its number of loops while it
//     runs ([ReserveProcs]), so the rest of the program keeps the Ps it
//     had.
//   - A stop-the-world (garbage collection) must reach a loop sleeping in
//     the kernel. The runtime asks a running goroutine to stop with a
//     signal (async preemption, Go 1.14; resent until the goroutine
//     stops), which interrupts epoll_wait: it returns EINTR whatever
//     SA_RESTART says (signal(7)), and the loop yields at once. With async
//     preemption off (GODEBUG asyncpreemptoff=1) the stop waits for the
//     raw wait to end, at most holdWait.
type Poller struct {
	epfd, evfd int
	events     [128]unix.EpollEvent
	// Whether the loop may wait holding its P (MayHold), as of
	// holdChecked.
	canHold     bool
	holdChecked int64
	// Waking the loop: work is set once something is queued; asleep
	// while the loop waits, or is about to, in epoll_wait; kicked while
	// an eventfd write is unread. A loop that is busy finds work without
	// an eventfd write (see Notify).
	work, asleep, kicked atomic.Bool
}

// WakeFd is the epoll data (Fd, with Pad 0) of the Poller's own eventfd:
// the loop passes such an event to [Poller.Woken]. Callers register
// their descriptors with other data.
const WakeFd = -1

// holdWait is how long, in milliseconds, a loop waits holding its P.
const holdWait = 5

// holdCheck is how often, in nanoseconds, MayHold looks at GOMAXPROCS.
const holdCheck = 10e6

// Open creates p's epoll instance and eventfd; now is the loop's time.
func (p *Poller) Open(now int64) error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: WakeFd}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.epfd, p.evfd, p.holdChecked = epfd, evfd, now-holdCheck
	return nil
}

// Close closes p's descriptors. The loop calls it once, last.
func (p *Poller) Close() {
	unix.Close(p.epfd)
	unix.Close(p.evfd)
}

// Add registers fd with the events and data of ev (epoll_ctl(2),
// EPOLL_CTL_ADD).
func (p *Poller) Add(fd int, ev *unix.EpollEvent) unix.Errno {
	return epollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, ev)
}

// Del removes fd from p. A descriptor closed for good need not be
// removed: close(2) takes it out of every epoll set once its last
// reference closes (epoll(7)).
func (p *Poller) Del(fd int) unix.Errno {
	var ev unix.EpollEvent
	return epollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, &ev)
}

// Notify tells the loop that work is queued for it (see [Poller.Work]).
// The loop looks at work after every turn, and Wait sets asleep before
// it waits and then looks at work once more, so an eventfd write is
// needed only when Notify finds it asleep: one of the two sees the
// other's store (sync/atomic's operations are sequentially consistent).
// Any goroutine may call it.
func (p *Poller) Notify() {
	p.work.Store(true)
	if p.asleep.Load() && p.kicked.CompareAndSwap(false, true) {
		one := uint64(1)
		unix.Write(p.evfd, (*[8]byte)(unsafe.Pointer(&one))[:])
	}
}

// Work reports, and clears, whether Notify was called since the last
// look: the loop then drains what was queued.
func (p *Poller) Work() bool { return p.work.Swap(false) }

// Woken takes the eventfd's event (Fd WakeFd, Pad 0) out of the way.
func (p *Poller) Woken() {
	var b [8]byte
	unix.Read(p.evfd, b[:])
	p.kicked.Store(false)
}

// Wait returns the events ready, waiting for up to timeout milliseconds
// (-1: until an event) when none is and no work is queued; now is the
// loop's time. The events are p's and valid until the next Wait.
func (p *Poller) Wait(timeout int, now int64) []unix.EpollEvent {
	if timeout != 0 {
		p.asleep.Store(true)
		if p.work.Load() {
			timeout = 0
		}
	}
	n := p.wait(timeout, now)
	p.asleep.Store(false)
	return p.events[:n]
}

// wait is Wait's epoll_wait, holding the P while the loop is busy.
func (p *Poller) wait(timeout int, now int64) int {
	if timeout == 0 {
		return epollWait(p.epfd, p.events[:], 0)
	}
	if p.MayHold(now) {
		hold := holdWait
		if timeout > 0 && timeout < hold {
			hold = timeout
		}
		if n := epollWait(p.epfd, p.events[:], hold); n > 0 {
			return n
		}
		// Nothing for a while, or a signal: give the P to the runtime
		// if it asked for it (a stop-the-world, a stack scan), then
		// wait without holding it.
		runtime.Gosched()
		if timeout > 0 {
			// The hold counts against the timeout.
			if timeout -= hold; timeout <= 0 {
				return 0
			}
		}
	}
	n, _, e := syscall.Syscall6(unix.SYS_EPOLL_PWAIT, uintptr(p.epfd), uintptr(unsafe.Pointer(&p.events[0])),
		uintptr(len(p.events)), uintptr(timeout), 0, 0)
	if e != 0 {
		return 0 // EINTR
	}
	return int(n)
}

// MayHold reports whether the loop may wait holding its P: only while
// the program has more Ps than all loops hold ([ReserveProcs]), so that
// a GOMAXPROCS lowered under the loops' feet (testing.AllocsPerRun sets
// 1) does not leave the rest of the program without one. It reads
// GOMAXPROCS, which takes the scheduler's lock, at most every holdCheck
// of the loop time now.
func (p *Poller) MayHold(now int64) bool {
	if now-p.holdChecked >= holdCheck {
		p.holdChecked = now
		p.canHold = runtime.GOMAXPROCS(0) > int(procs.held.Load())
	}
	return p.canHold
}

// CheckHold is MayHold looking at GOMAXPROCS now, however recently it
// looked.
func (p *Poller) CheckHold(now int64) bool {
	p.holdChecked = now - holdCheck
	return p.MayHold(now)
}

// epollWait is epoll_wait(2) (as epoll_pwait with no signal mask), a raw
// system call that blocks up to timeout milliseconds (0: not at all). It
// returns 0 when a signal interrupted it.
func epollWait(epfd int, events []unix.EpollEvent, timeout int) int {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(timeout), 0, 0)
	if e != 0 {
		return 0 // EINTR
	}
	return int(n)
}

// epollCtl is epoll_ctl(2), which does not block.
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	return e
}
