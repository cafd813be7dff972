// Package nbsys makes system calls on non-blocking sockets (those of
// package net) as raw calls, so that zeroio's hot paths skip the runtime's
// entersyscall and the sysmon wake-ups it causes.
//
// Every socket package net makes is non-blocking, so its reads and writes
// return at once, with EAGAIN when there is nothing to do, and the
// netpoller waits. The runtime's entersyscall and exitsyscall, which
// syscall.Syscall wraps around each call, exist for calls that may block:
// they let another thread take the P. Besides their own cost,
// entersyscall wakes the sysmon thread when it sleeps because every P was
// idle, which is every time a relay or a server wakes from the netpoller
// for a datagram or a short message: on a busy machine with few CPUs that
// wake is a futex call and a context switch each time (entersyscall in
// runtime/proc.go, entersyscallWakeSysmon). The relay's UDP ping-pong
// benchmark (RelayUDP/mode=pingpong) measures the difference.
//
// Only calls that cannot block may be raw: a raw call holds its P, and
// every goroutine queued on it, until it returns. A regular file's read
// may wait for the disk, so it is never made here. Package splice makes
// its calls raw for a proxy's copy (no limit, two sockets of package
// net): there each wait for the next burst lets sysmon sleep and the next
// splice wakes it, so on a stream through the relay the sysmon thread
// would take a large share of the relay's CPU. Its bounded copies keep
// syscall.Syscall (see netSocket in package splice for why).
//
// The relay's event loops make all their socket calls here: accept4,
// socket, connect, getsockname, setsockopt and shutdown besides the data
// calls, with addresses in fixed buffers of package internal/sockaddr
// (x/sys/unix's Accept4, Connect and Getsockname convert to and from the
// Sockaddr interface, which allocates on every call). Descriptors are
// ints, as in x/sys/unix.
//
// The package is Linux-only; on other GOOS it is empty.
package nbsys
