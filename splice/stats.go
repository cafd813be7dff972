package splice

import (
	"sync/atomic"
	"unsafe"

	"github.com/zeroio/zeroio/internal/percpu"
)

// Stats counts what copies did, process-wide, since start. Read it with
// [ReadStats]; the counters only grow, except the gauges PipesInUse and
// BuffersInUse.
//
// Each call to Copy, CopyN or Copier.Copy that starts a copy counts once,
// under the path that moved its last bytes (the first path tried if it
// moved none); bytes count under the path that moved them. Calls that
// return before choosing a path (a limit of zero or less, a nil end) and
// a copy whose Progress callback panics are not counted.
type Stats struct {
	SpliceCopies        uint64 // copies through a pipe with splice(2)
	SendfileCopies      uint64 // copies from a regular file with sendfile(2)
	CopyFileRangeCopies uint64 // file-to-file copies with copy_file_range(2)
	BufferCopies        uint64 // copies through a pooled buffer
	SpliceBytes         uint64 // bytes that reached dst by splice(2)
	SendfileBytes       uint64 // bytes that reached dst by sendfile(2)
	CopyFileRangeBytes  uint64 // bytes that reached dst by copy_file_range(2)
	BufferBytes         uint64 // bytes that reached dst through a buffer

	// Fallbacks counts copies where the kernel refused a zero-copy path
	// (EINVAL, ENOSYS, EOPNOTSUPP, EXDEV before any byte moved) and the
	// copy continued by another path. The sendfile(2) a copy from an
	// *os.File tries before it knows what the file is does not count when
	// the file turns out not to be a regular one.
	Fallbacks uint64
	// Rescued counts bytes read back out of a pipe and written to dst
	// with Write because dst refused splice(2) after src had filled the
	// pipe: bytes a naive splice loop would lose.
	Rescued uint64

	PipesCreated   uint64 // pipes made with pipe2(2)
	PipesReused    uint64 // pipes taken from the pool
	PipesDestroyed uint64 // pipes closed because they still held data or failed
	PipesCollected uint64 // idle pipes closed after the pool dropped them
	PipesInUse     uint64 // pipes held by copies right now (a gauge)
	// SmallPipes counts pipes whose capacity the kernel granted below the
	// request, as it does past /proc/sys/fs/pipe-user-pages-soft for an
	// unprivileged user (pipe(7)).
	SmallPipes      uint64
	PipeErrors      uint64 // pipe2(2) failures (then the copy used a buffer)
	BuffersBorrowed uint64 // pooled buffers taken by the buffered path
	BuffersInUse    uint64 // pooled buffers held by copies right now (a gauge)
}

type counter int

const (
	cSpliceCopies counter = iota
	cSendfileCopies
	cCopyFileRangeCopies
	cBufferCopies
	cSpliceBytes
	cSendfileBytes
	cCopyFileRangeBytes
	cBufferBytes
	cFallbacks
	cRescued
	cPipesCreated
	cPipesReused
	cPipesDestroyed
	cPipesCollected
	cPipesInUse
	cSmallPipes
	cPipeErrors
	cBuffersBorrowed
	cBuffersInUse
	nCounters
)

// shard is one P's counters, padded so that two Ps never share a line.
type shard struct {
	c [nCounters]uint64
	_ [percpu.CacheLine - (nCounters*8)%percpu.CacheLine]byte
}

var (
	shards   = make([]shard, percpu.Procs())
	overflow [nCounters]atomic.Uint64 // for Ps beyond len(shards) (GOMAXPROCS grew)
)

// add adds d to counter i on the current P. d may be ^uint64(0) for -1:
// sums wrap modulo 2^64, so a gauge adds up across shards.
func add(i counter, d uint64) {
	id := percpu.Pin()
	if id < len(shards) {
		s := &shards[id]
		percpu.Acquire(unsafe.Pointer(s))
		percpu.Add(&s.c[i], d)
		percpu.Release(unsafe.Pointer(s))
		percpu.Unpin()
		return
	}
	percpu.Unpin()
	overflow[i].Add(d)
}

// ReadStats returns the process-wide counters. It does not stop copies in
// flight, so counters may lag by the updates in progress.
func ReadStats() Stats {
	var t [nCounters]uint64
	for i := range shards {
		for j := range t {
			t[j] += percpu.Load(&shards[i].c[j])
		}
	}
	for j := range t {
		t[j] += overflow[j].Load()
	}
	// A gauge goes up on the P that takes a pipe or buffer and down on
	// the P that gives it back, often another one. Read shard by shard
	// while copies run, the sum can see a give-back whose take came too
	// late for the shard already read: one below the truth, and below
	// zero it wraps to 2^64-1, a spike a scrape would record. The
	// gauge is at least zero.
	for _, g := range []counter{cPipesInUse, cBuffersInUse} {
		if int64(t[g]) < 0 {
			t[g] = 0
		}
	}
	return Stats{
		SpliceCopies:        t[cSpliceCopies],
		SendfileCopies:      t[cSendfileCopies],
		CopyFileRangeCopies: t[cCopyFileRangeCopies],
		BufferCopies:        t[cBufferCopies],
		SpliceBytes:         t[cSpliceBytes],
		SendfileBytes:       t[cSendfileBytes],
		CopyFileRangeBytes:  t[cCopyFileRangeBytes],
		BufferBytes:         t[cBufferBytes],
		Fallbacks:           t[cFallbacks],
		Rescued:             t[cRescued],
		PipesCreated:        t[cPipesCreated],
		PipesReused:         t[cPipesReused],
		PipesDestroyed:      t[cPipesDestroyed],
		PipesCollected:      t[cPipesCollected],
		PipesInUse:          t[cPipesInUse],
		SmallPipes:          t[cSmallPipes],
		PipeErrors:          t[cPipeErrors],
		BuffersBorrowed:     t[cBuffersBorrowed],
		BuffersInUse:        t[cBuffersInUse],
	}
}

// path is the way a copy moved its bytes.
type path uint8

const (
	pathBuffer path = iota
	pathSplice
	pathSendfile
	pathCopyFileRange
	nPaths
)

var (
	copiesBy = [nPaths]counter{cBufferCopies, cSpliceCopies, cSendfileCopies, cCopyFileRangeCopies}
	bytesBy  = [nPaths]counter{cBufferBytes, cSpliceBytes, cSendfileBytes, cCopyFileRangeBytes}
)

// tally is what one copy did, counted once when it ends.
type tally struct {
	last      path          // the path that moved the last bytes
	bytes     [nPaths]int64 // bytes that reached dst, by path
	fellBack  bool          // a kernel path was refused and another took over
	rescuedIn int64         // bytes read back out of a pipe
}

func (t *tally) moved(p path, n int) {
	t.last = p
	t.bytes[p] += int64(n)
}

// flush adds t to the process-wide counters, pinning to a P once for all
// of them rather than once per counter as add does, and clears t.
func (t *tally) flush() {
	id := percpu.Pin()
	if id < len(shards) {
		s := &shards[id]
		percpu.Acquire(unsafe.Pointer(s))
		t.each(func(i counter, d uint64) { percpu.Add(&s.c[i], d) })
		percpu.Release(unsafe.Pointer(s))
		percpu.Unpin()
	} else {
		percpu.Unpin()
		t.each(func(i counter, d uint64) { overflow[i].Add(d) })
	}
	*t = tally{}
}

// each calls f with every counter t adds to and the amount.
func (t *tally) each(f func(counter, uint64)) {
	f(copiesBy[t.last], 1)
	for p, n := range t.bytes {
		if n != 0 {
			f(bytesBy[p], uint64(n))
		}
	}
	if t.fellBack {
		f(cFallbacks, 1)
	}
	if t.rescuedIn != 0 {
		f(cRescued, uint64(t.rescuedIn))
	}
}
