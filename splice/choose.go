package splice

import (
	"math"
	"net"
	"os"
	"syscall"
)

// This file is the one place where a copy chooses how to move its bytes.
// [choose] is a pure function of what is known of the two ends and of the
// paths already refused, so it builds and is table-tested on every GOOS;
// on Linux, job.run (copy_linux.go) carries its answers out.

// kind is what an end of a copy is, as far as the kernel paths care. It
// takes an fstat(2) to learn for files and unknown descriptors.
type kind uint8

const (
	kNone  kind = iota // no usable descriptor: Read or Write only
	kSock              // a stream socket
	kPipe              // a pipe or FIFO in non-blocking mode
	kFile              // a regular file
	kOther             // a non-blocking character device or the like: try splice
)

// endType is what an end of a copy is by its Go type alone, known without
// a system call.
type endType uint8

const (
	tNone       endType = iota // no descriptor the copy may use
	tTCP                       // *net.TCPConn
	tUnixStream                // *net.UnixConn of network "unix"
	tUnixMsg                   // *net.UnixConn of network "unixgram" or "unixpacket"
	tUnix                      // *net.UnixConn whose address does not say its network
	tFile                      // *os.File
	tFD                        // another descriptor (a syscall.Conn from an Unwrapper)
)

// typeOf returns the type of an end of a copy. Only the standard types
// count unless v came out of an [Unwrapper]: a type that embeds
// *net.TCPConn gets its SyscallConn method for free but may well change
// the bytes its Read and Write move.
func typeOf(v any, unwrapped bool) endType {
	switch c := v.(type) {
	case *net.TCPConn:
		return tTCP
	case *net.UnixConn:
		switch unixNet(c) {
		case "unix":
			return tUnixStream
		case "":
			return tUnix
		}
		return tUnixMsg
	case *os.File:
		return tFile
	case syscall.Conn:
		if unwrapped {
			return tFD
		}
	}
	return tNone
}

// unixNet returns c's network ("unix", "unixgram", "unixpacket"), or ""
// when its local address does not say.
func unixNet(c *net.UnixConn) string {
	if a, ok := c.LocalAddr().(*net.UnixAddr); ok && a != nil {
		return a.Net
	}
	return ""
}

// stream reports whether the type alone says the end is a stream socket.
func (t endType) stream() bool { return t == tTCP || t == tUnixStream }

// end is what the choice knows of one end of a copy.
type end struct {
	typ   endType
	known bool  // kind (and size) are classified
	kind  kind  // valid when known
	size  int64 // a regular file's size, when kind is kFile
}

// newEnd returns an end of type t, classified at once when the type
// alone tells its kind.
func newEnd(t endType) end {
	switch t {
	case tTCP, tUnixStream:
		return end{typ: t, known: true, kind: kSock}
	case tNone, tUnixMsg:
		// A datagram Unix socket is not spliced: splice would merge
		// its messages.
		return end{typ: t, known: true, kind: kNone}
	}
	return end{typ: t}
}

// step is one thing a copy does next.
type step uint8

const (
	// stepClassifySrc and stepClassifyDst ask the caller to classify an
	// end (an fstat(2)) and to choose again: classification costs a
	// system call, so choose asks for it only when the answer depends on
	// it.
	stepClassifySrc step = iota
	stepClassifyDst
	// The kernel paths. Each may refuse before moving a byte (or hand
	// over the bytes it took, see job.rescue); then the caller records it
	// in choice.tried and chooses again.
	stepSplice        // splice(2) through a pipe
	stepSendfile      // sendfile(2) from a regular file
	stepCopyFileRange // copy_file_range(2) between regular files
	// The buffered paths, which always finish the copy.
	stepRead // read(2) on src's descriptor, waiting in the netpoller, and dst.Write
	stepCopy // src.Read and dst.Write, as io.Copy does
	nSteps
)

// steps is a set of steps, for the kernel paths a copy has tried.
type steps uint8

func (s steps) has(st step) bool { return s&(1<<st) != 0 }

func (s *steps) add(st step) { *s |= 1 << st }

// choice is the input of choose.
type choice struct {
	limit    int64 // bytes left to copy; math.MaxInt64 without a limit
	src, dst end
	tried    steps // kernel paths that refused this copy
}

// action is what choose answers.
type action struct {
	step step
	// probe: a sendfile(2) tried before src is known to be a regular
	// file, as the standard library does (net/sendfile_linux.go): the
	// kernel refuses an in_fd it cannot seek with EINVAL before reading
	// a byte, and that refusal is the probe doing its job, not a
	// fallback ([Stats].Fallbacks).
	probe bool
	// probeDst: splice into an *os.File dst that is not classified; it
	// is classified only if it does not take the bytes (job.probeDst).
	probeDst bool
	// fellBack: a regular file refused sendfile(2) earlier, so this copy
	// counts as a fallback although the probe did not.
	fellBack bool
}

const (
	// smallCopy is the largest limit copied with read(2) and write(2)
	// rather than by a kernel path, except for the pairs that take one
	// from minZeroCopy up.
	smallCopy = 16 << 10
	// minZeroCopy is the smallest limit for which a regular file to a
	// stream socket takes sendfile(2), and a stream socket to another
	// (Unix to TCP aside) takes splice(2). Below it the fixed cost of a
	// kernel path (the pipe round trip of splice, the setup of sendfile)
	// outweighs the copy through user space that it saves; the splice
	// benchmarks (docs/BENCHMARKS.md) measure the crossover.
	minZeroCopy = 4 << 10
	// fileSpliceMin is the shortest copy from a regular file into a TCP
	// socket that splices through a pipe rather than taking sendfile(2).
	// sendfile moves a file through the kernel's own pipe of 16 pages,
	// pushing each 64 KiB into the socket in turn; one splice into a
	// pooled 1 MiB pipe and one out of it move the same bytes with fewer
	// rounds through the TCP send path. Below fileSpliceMin the extra
	// splice call and the pipe cost more than those rounds save, so
	// sendfile stays. Into a Unix socket sendfile stays at every size:
	// there is no TCP segmentation to batch, and the second splice is
	// pure cost. The file-to-tcp and file-to-unix cases of the splice
	// benchmarks measure both.
	fileSpliceMin = 256 << 10
)

// choose returns what a copy does next. The rules, in order:
//
//  1. A file into a stream socket, from minZeroCopy up: sendfile(2) at
//     once, as a probe that needs no fstat(2); a long copy from a long
//     regular file into TCP splices instead (see fileSpliceMin).
//  2. Other short copies go through a buffer, without even an fstat(2) to
//     classify the ends: for a few KiB, read(2) and write(2) cost less
//     than that classification, and below minZeroCopy less than the pipe
//     round trip of splice too.
//  3. A src the kernel paths cannot use (a datagram socket, a blocking
//     pipe): src.Read and dst.Write. A dst without a usable descriptor:
//     read(2) and dst.Write.
//  4. Regular file to regular file: copy_file_range(2), then sendfile(2);
//     a regular file to anything else: sendfile(2).
//  5. A Unix socket into a TCP socket past smallCopy: read(2) and
//     dst.Write, because for this pair splice(2) is slower than that on
//     current kernels, although the standard library splices it since
//     go.dev/cl/113997 (BenchmarkSplice pair=unix-to-tcp keeps a buffered
//     zeroio variant beside the spliced one to show it).
//  6. Anything else with descriptors: splice(2) through a pipe. An
//     *os.File dst after a src that is not a regular file is not
//     classified first: the copy splices into it as the standard library
//     does (os.File.ReadFrom); the fstat(2) is a visible share of a
//     tcp-to-file copy of tens of KiB, and a regular file, the usual dst,
//     never needs it.
//  7. When every kernel path refused: read(2) and dst.Write.
func choose(c choice) action {
	srcStream, dstStream := c.src.typ.stream(), c.dst.typ.stream()
	dstFD := c.dst.typ != tNone

	// 1: a file into a stream socket.
	if dstFD && c.limit >= minZeroCopy && c.src.typ == tFile && dstStream && !c.tried.has(stepSendfile) {
		if c.limit >= fileSpliceMin && c.dst.typ == tTCP && !c.tried.has(stepSplice) {
			if !c.src.known {
				return action{step: stepClassifySrc}
			}
			if c.src.kind == kFile && c.src.size >= fileSpliceMin {
				return action{step: stepSplice}
			}
		}
		return action{step: stepSendfile, probe: true}
	}

	// 2: short copies. Only a Unix socket may be a datagram one, which
	// needs its own Read.
	if c.limit <= smallCopy && (c.limit < minZeroCopy || !srcStream || !dstStream) {
		if c.src.typ == tUnixMsg || c.src.typ == tUnix {
			if !c.src.known {
				return action{step: stepClassifySrc}
			}
			if c.src.kind == kNone {
				return action{step: stepCopy}
			}
		}
		return action{step: stepRead}
	}

	// 3: ends the kernel paths cannot use.
	if !c.src.known {
		return action{step: stepClassifySrc}
	}
	if c.src.kind == kNone {
		return action{step: stepCopy}
	}
	if !dstFD {
		return action{step: stepRead}
	}
	probeDst := c.dst.typ == tFile && c.src.kind != kFile
	if !probeDst {
		if !c.dst.known {
			return action{step: stepClassifyDst}
		}
		if c.dst.kind == kNone {
			return action{step: stepRead}
		}
	}

	// 4: from a regular file.
	fellBack := false
	if c.src.kind == kFile {
		if c.dst.known && c.dst.kind == kFile && !c.tried.has(stepCopyFileRange) {
			return action{step: stepCopyFileRange}
		}
		if !c.tried.has(stepSendfile) {
			return action{step: stepSendfile}
		}
		fellBack = true
	}

	// 5: Unix into TCP.
	if (c.src.typ == tUnixStream || c.src.typ == tUnix) && c.dst.typ == tTCP && c.limit > smallCopy {
		return action{step: stepRead, fellBack: fellBack}
	}

	// 6 and 7.
	if !c.tried.has(stepSplice) {
		return action{step: stepSplice, probeDst: probeDst, fellBack: fellBack}
	}
	return action{step: stepRead, fellBack: fellBack}
}

// netSocket reports whether an end of type t is a socket of package net,
// which is non-blocking by construction, so that its system calls cannot
// block and may be raw (package nbsys): without the runtime's entersyscall
// and exitsyscall around them, which wake the sysmon thread each time the
// copy comes back from waiting with every P idle (entersyscall in
// runtime/proc.go: entersyscallWakeSysmon).
func (t endType) netSocket() bool {
	switch t {
	case tTCP, tUnixStream, tUnixMsg, tUnix:
		return true
	}
	return false
}

// syscalls is how a copy makes its system calls.
type syscalls struct {
	// proxy: no limit and two stream sockets, a proxy's copy, which
	// starts interactive (see job.splice).
	proxy bool
	// Raw calls: rawSrc for reads and splices from src, rawDst for
	// splices into dst, rawOut for the buffered paths' writes, which go
	// to dst as given.
	rawSrc, rawDst, rawOut bool
}

// chooseSyscalls decides, for a copy of limit bytes (math.MaxInt64: no
// limit) between src and dst (unwrapped) that writes to out (dst as
// given), which calls are raw; relay: the copy is a relay's whatever its
// limit ([Copier].Relay).
//
// A proxy's copy makes them raw: each of its many short system calls would
// otherwise wake sysmon, which then costs the relay CPU per byte and
// latency per message. Short copies (up to smallCopy) make them raw too,
// for the same per-call saving. Longer bounded copies keep
// syscall.Syscall: on a machine with few CPUs, sysmon's polling after each
// wake keeps an otherwise idle CPU from halting, which spares the
// processes at the other ends the cost of waking it; raw calls lose that,
// and long copies between Unix sockets get slower. Package nbsys explains
// the runtime side.
func chooseSyscalls(limit int64, relay bool, src, dst, out endType) syscalls {
	if (limit == math.MaxInt64 || relay) && src.stream() && dst.stream() {
		return syscalls{proxy: true, rawSrc: true, rawDst: true, rawOut: out.netSocket()}
	}
	if limit <= smallCopy {
		return syscalls{rawSrc: src.netSocket(), rawDst: dst.netSocket(), rawOut: out.netSocket()}
	}
	return syscalls{}
}
