package bench

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinProcess confines every thread of this process to one CPU, so that
// the processes it starts until unpin is called (which inherit the
// affinity of the thread that forks them) share that CPU with it. It
// returns the function that restores each thread's previous set; threads
// made meanwhile get the first thread's. If cpu is not one this process
// may run on (taskset, a container's cpuset), it pins to the lowest that
// is: the kernel refuses a CPU outside the set, which left nothing pinned.
//
// The UDP ping-pong needs it on machines with few (virtual) CPUs: whether
// the scheduler puts the relay on the client's CPU or on an idle one
// decides whether each message pays for waking a halted CPU, which would
// make the latency bimodal whatever the relay.
func pinProcess(cpu int) (unpin func()) {
	old := map[int]unix.CPUSet{}
	var first unix.CPUSet
	var one unix.CPUSet
	for _, tid := range threads() {
		var s unix.CPUSet
		if unix.SchedGetaffinity(tid, &s) != nil {
			continue
		}
		if len(old) == 0 {
			first = s
			one.Set(allowedCPU(s, cpu))
		}
		old[tid] = s
		unix.SchedSetaffinity(tid, &one)
	}
	return func() {
		for _, tid := range threads() {
			s, ok := old[tid]
			if !ok {
				s = first
			}
			unix.SchedSetaffinity(tid, &s)
		}
	}
}

// allowedCPU returns cpu if set has it, else the lowest CPU in set.
func allowedCPU(set unix.CPUSet, cpu int) int {
	if set.IsSet(cpu) {
		return cpu
	}
	for c := range 1024 { // CPU_SETSIZE, the bits of a unix.CPUSet
		if set.IsSet(c) {
			return c
		}
	}
	return cpu
}

func threads() []int {
	ents, _ := os.ReadDir("/proc/self/task")
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}
