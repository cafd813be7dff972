package splice

import (
	"math/bits"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	minPipeSize = 4096    // one page; F_SETPIPE_SZ rounds up to this
	maxPipeSize = 1 << 30 // the largest class; the kernel caps at pipe-max-size
	pipeClasses = 19      // 4 KiB << 0 ... 4 KiB << 18 (1 GiB)
)

// pipeFDs are the two ends of a pipe; the cleanup gets them by value.
type pipeFDs struct{ r, w int }

// A pipe is the kernel buffer splice(2) moves bytes through.
type pipe struct {
	pipeFDs
	size    int // capacity the kernel granted, in bytes
	data    int // bytes in the pipe now
	class   uint8
	cleanup runtime.Cleanup
}

// pipePools hold idle, empty pipes by requested capacity class, so copies
// that ask for different PipeSize values do not resize each other's pipes.
// A sync.Pool may drop idle pipes at any GC; the cleanup attached to each
// pipe then closes its descriptors, as internal/poll does.
var pipePools [pipeClasses]sync.Pool

// pipeClass returns the class and the rounded request for size bytes.
func pipeClass(size int) (uint8, int) {
	size = min(max(size, minPipeSize), maxPipeSize)
	c := bits.Len(uint(size-1)) - 12 // 4096 -> 0
	return uint8(c), minPipeSize << c
}

// getPipe returns an empty pipe of about size bytes, from the pool or new.
func getPipe(size int) (*pipe, error) {
	class, req := pipeClass(size)
	if v := pipePools[class].Get(); v != nil {
		add(cPipesReused, 1)
		add(cPipesInUse, 1)
		return v.(*pipe), nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		add(cPipeErrors, 1)
		return nil, err
	}
	// F_SETPIPE_SZ fails with EPERM for an unprivileged user past
	// pipe-user-pages-soft or above pipe-max-size (pipe(7), fcntl(2)), and
	// a new pipe itself may hold as little as two pages (Linux 5.14, "pipe:
	// increase minimum default pipe size to 2 pages"). Ask for the size,
	// then believe what the kernel reports.
	got, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, req)
	if err != nil {
		got, err = unix.FcntlInt(uintptr(fds[0]), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			got = minPipeSize
		}
	}
	if got < req {
		add(cSmallPipes, 1)
	}
	p := &pipe{pipeFDs: pipeFDs{r: fds[0], w: fds[1]}, size: got, class: class}
	p.cleanup = runtime.AddCleanup(p, closeDropped, p.pipeFDs)
	add(cPipesCreated, 1)
	add(cPipesInUse, 1)
	return p, nil
}

// putPipe returns p to its pool if it is empty and destroys it otherwise:
// bytes left in a pipe belong to a copy that failed and must never reach
// the next one.
func putPipe(p *pipe) {
	add(cPipesInUse, ^uint64(0))
	if p.data != 0 {
		destroyPipe(p)
		return
	}
	pipePools[p.class].Put(p)
}

func destroyPipe(p *pipe) {
	p.cleanup.Stop()
	unix.Close(p.r)
	unix.Close(p.w)
	add(cPipesDestroyed, 1)
}

// closeDropped closes a pipe the pool dropped; it runs as a cleanup.
func closeDropped(f pipeFDs) {
	unix.Close(f.r)
	unix.Close(f.w)
	add(cPipesCollected, 1)
}
