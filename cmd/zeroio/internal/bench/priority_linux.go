package bench

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// fifoPriority is the lowest real-time priority: above every thread of the
// normal class, below the kernel's real-time threads.
const fifoPriority = 1

// raisePriority moves every thread of this process to SCHED_FIFO, so that
// the processes it starts until restore is called (which inherit the
// policy of the thread that forks them) are scheduled the same way: on a
// machine busy with other work, a ping-pong pinned to one CPU would
// otherwise measure the time slices of whatever else runs there (a
// woken task of the normal class can wait a whole slice, milliseconds,
// behind a running one), not the relays. The kernel still keeps a share of
// each second for the normal class (sched_rt_runtime_us). It returns the
// function that restores each thread's policy (threads made meanwhile get
// the first thread's), or an error and a restore that does nothing when
// the process may not (it needs CAP_SYS_NICE or an RLIMIT_RTPRIO).
func raisePriority() (restore func(), err error) {
	if err := canRaisePriority(); err != nil {
		return func() {}, err
	}
	old := map[int]*unix.SchedAttr{}
	var first *unix.SchedAttr
	for _, tid := range threads() {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue
		}
		if first == nil {
			first = a
		}
		old[tid] = a
		unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: fifoPriority}, 0)
	}
	return func() {
		for _, tid := range threads() {
			a, ok := old[tid]
			if !ok {
				a = first
			}
			if a != nil {
				unix.SchedSetAttr(tid, a, 0)
			}
		}
	}, nil
}

// canRaisePriority reports why this process may not move its threads to
// SCHED_FIFO, nil if it may: it tries on the calling thread and puts it
// back.
func canRaisePriority() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return err
	}
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: fifoPriority}, 0); err != nil {
		return fmt.Errorf("SCHED_FIFO: %w", err)
	}
	return unix.SchedSetAttr(0, old, 0)
}
