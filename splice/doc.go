// Package splice is a drop-in for [io.Copy] between sockets and files
// that, on Linux, lets the kernel move the bytes: splice(2) through a
// pooled pipe between any two stream descriptors, sendfile(2) from a
// regular file, and copy_file_range(2) between regular files. Where no
// descriptor is available it copies through a buffer from
// [github.com/zeroio/zeroio/pool], never a fresh allocation.
//
// # Drop-in
//
// [Copy] and [CopyN] have the signatures and results of io.Copy and
// io.CopyN. A [Copier] adds options: a byte Limit, a Progress callback
// that hears about every chunk as it reaches dst (so a relay can count
// bytes live and keep an idle timeout honest during a splice), and the
// PipeSize to request. Every path reports exactly how many bytes reached
// dst, also when it fails midway, and bytes already taken from src are
// never dropped: if dst refuses splice after src filled the pipe, they are
// read back out and written with dst.Write.
//
// # Which ends splice
//
// An end qualifies when it is a *net.TCPConn, a stream *net.UnixConn or an
// *os.File (a regular file, or a pipe, FIFO, socket or character device in
// non-blocking mode, as [os.Pipe] makes them). Any other type qualifies
// only through [Unwrapper]: a type that merely embeds *net.TCPConn gets a
// SyscallConn method for free, yet its Read or Write may change the bytes,
// so a copy never takes that method as a promise. TLS connections and
// other transforming wrappers therefore take the buffered path.
//
// On Linux the path for a pair is:
//
//   - a regular file of 256 KiB or more to a TCP socket, copying 256 KiB
//     or more or without a limit: splice(2) through a pipe, which for
//     long copies takes less time than sendfile(2) (sendfile goes
//     through the kernel's own 64 KiB pipe; for shorter copies sendfile
//     is the faster);
//   - any other *os.File to a stream socket, from 4 KiB or without a
//     limit: sendfile(2) straight away, as the standard library does; a
//     src that is not a regular file refuses it (EINVAL) before giving
//     up a byte, which [Stats].Fallbacks does not count, and takes the
//     paths below;
//   - a stream socket to another limited to 4 KiB up to 16 KiB (a Limit,
//     CopyN's n): splice(2) through a pipe;
//   - any other copy limited to 16 KiB or less, and every copy limited
//     to less than 4 KiB: read(2) into a pooled buffer and dst.Write,
//     which for a few KiB costs less than the pipe round trip of splice
//     or the fstat(2) that choosing a kernel path takes;
//   - regular file to regular file: copy_file_range(2), then sendfile(2);
//   - regular file to anything else with a descriptor: sendfile(2);
//   - a Unix socket to a TCP socket, past 16 KiB or without a limit:
//     read(2) and dst.Write, because for this one pair splice moves
//     fewer bytes per second than that on current kernels (see
//     docs/BENCHMARKS.md);
//   - any other pair with descriptors: splice(2) through a pipe; a copy
//     without a limit between two stream sockets (a proxy's) reads what
//     arrives after each wait with read(2), up to 16 KiB, and writes it,
//     as HAProxy's splice-auto does: a short message costs less that way
//     than through a pipe, and takes no pipe. A read that fills 16 KiB
//     means bulk: the rest of that burst, and every later burst of 16 KiB
//     or more, is spliced;
//   - a descriptor on the src side only: read(2) into a pooled buffer,
//     then dst.Write;
//   - no descriptor on the src side: src.Read and dst.Write through a
//     pooled buffer.
//
// A kernel path that fails with EINVAL, ENOSYS, EOPNOTSUPP or EXDEV
// before moving a byte means "not here"; the copy moves on to the next
// path and [Stats].Fallbacks counts it.
//
// An *os.File dst after a socket or a pipe is not classified first: the
// copy splices into it, as (*os.File).ReadFrom does, and classifies it
// with fstat(2) only if it refuses bytes. A blocking pipe, socket or device
// (which the netpoller cannot wait for) or a datagram socket then gets
// the bytes already in the pipe by Write, and the rest on the buffered
// path; [Stats].Rescued and Fallbacks count it.
//
// # The netpoller, deadlines and idle copies
//
// Every wait happens in Go's netpoller through syscall.RawConn on both
// ends, so read and write deadlines are honoured, and closing the end the
// copy is waiting on unblocks it with an error that satisfies
// errors.Is(err, net.ErrClosed) (os.ErrClosed for files). As with
// io.Copy, closing dst while the copy waits for src to become readable
// is seen only when src next delivers bytes (or EOF); close src, or set
// a deadline on it, to stop an idle copy. Errors are *net.OpError for
// conns and *os.PathError for files, around an *os.SyscallError that
// names the system call.
//
// A copy waiting for src to become readable holds no pipe and no buffer:
// it takes a pipe (or buffer) when src has bytes and gives it back, empty,
// before waiting again. A relay can keep many thousands of idle copies
// open at the cost of their goroutines alone. (A src without a descriptor
// gives no way to wait without a buffer; that path holds its buffer.)
//
// # Pipes
//
// Pipes are pooled by requested size, sized with F_SETPIPE_SZ, destroyed
// rather than reused if a failed copy left bytes in them, and closed by a
// cleanup when the pool drops them. An unprivileged process past
// /proc/sys/fs/pipe-user-pages-soft gets smaller pipes than it asks for
// (pipe(7)); the copy reads the granted size with F_GETPIPE_SZ, works in
// chunks of that size, and counts it in [Stats].SmallPipes.
//
// # Other platforms
//
// On GOOS other than linux the same API copies every stream through a
// pooled buffer, and only the buffered counters of [ReadStats] move.
package splice
