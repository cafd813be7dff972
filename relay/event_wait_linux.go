package relay

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A loop waits for events in epoll_wait(2) on a thread of its own, as
// HAProxy's and nginx's threads do, in one of two ways. While it is busy
// (it had an event in the last holdWait) it enters epoll_wait as a raw
// system call: the runtime does not see the call, so the loop's goroutine
// keeps its P while the thread sleeps in the kernel, and an event wakes
// that thread straight into the loop. Once a wait has found nothing for
// holdWait it enters epoll_wait as an ordinary system call, which lets
// sysmon take the P back, and holds only the thread until the next event.
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
//   - Other goroutines (metrics, reloads, UDP routes, health checks)
//     must not wait for Ps that busy loops hold: each engine raises
//     GOMAXPROCS by its number of loops while it runs (reserveProcs), so
//     the rest of the program keeps the Ps it had.
//   - A stop-the-world (garbage collection) must reach a loop sleeping in
//     the kernel. The runtime asks a running goroutine to stop with a
//     signal (async preemption, Go 1.14; resent until the goroutine
//     stops), which interrupts epoll_wait: it returns EINTR whatever
//     SA_RESTART says (signal(7)), and the loop yields at once. With async
//     preemption off (GODEBUG asyncpreemptoff=1) the stop waits for the
//     raw wait to end, at most holdWait.

// holdWait is how long, in milliseconds, a loop waits holding its P.
const holdWait = 5

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

// wait returns the number of events ready in l.events, waiting for up to
// timeout milliseconds (-1: until an event) when none is.
func (l *loop) wait(timeout int) int {
	if timeout == 0 {
		return epollWait(l.epfd, l.events[:], 0)
	}
	if l.mayHold() {
		hold := holdWait
		if timeout > 0 && timeout < hold {
			hold = timeout
		}
		if n := epollWait(l.epfd, l.events[:], hold); n > 0 {
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
	n, _, e := syscall.Syscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd), uintptr(unsafe.Pointer(&l.events[0])),
		uintptr(len(l.events)), uintptr(timeout), 0, 0)
	if e != 0 {
		return 0 // EINTR
	}
	return int(n)
}

// mayHold reports whether l may wait holding its P: only while the
// program has more Ps than all engines' loops, so that a GOMAXPROCS
// lowered under the engines' feet (testing.AllocsPerRun sets 1) does not
// leave the rest of the program without one. It reads GOMAXPROCS, which
// takes the scheduler's lock, at most every holdCheck.
func (l *loop) mayHold() bool {
	if l.now-l.holdChecked >= holdCheck {
		l.holdChecked = l.now
		l.canHold = runtime.GOMAXPROCS(0) > int(procs.held.Load())
	}
	return l.canHold
}

// holdCheck is how often, in nanoseconds, mayHold looks at GOMAXPROCS.
const holdCheck = 10e6

// procs counts the Ps that the loops of every event engine in the
// process hold. The mutex orders the changes with their GOMAXPROCS
// calls; mayHold reads held without it.
var procs struct {
	sync.Mutex
	held atomic.Int64
}

// reserveProcs returns how many loops a new engine runs, one per P the
// program had (GOMAXPROCS, less the Ps other engines' loops hold), and
// raises GOMAXPROCS by as many, so that the loops' Ps come on top of the
// program's. releaseProcs gives them back.
func reserveProcs() int {
	procs.Lock()
	defer procs.Unlock()
	cur := runtime.GOMAXPROCS(0)
	n := max(cur-int(procs.held.Load()), 1)
	procs.held.Add(int64(n))
	runtime.GOMAXPROCS(cur + n)
	return n
}

// releaseProcs lowers GOMAXPROCS by the n Ps a stopped engine's loops
// held.
func releaseProcs(n int) {
	if n == 0 {
		return
	}
	procs.Lock()
	defer procs.Unlock()
	procs.held.Add(int64(-n))
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)-n, 1))
}
