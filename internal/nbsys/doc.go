// Package nbsys makes system calls on non-blocking sockets (those of
// package net) as raw calls.
//
// Every socket package net makes is non-blocking, so its reads and writes
// return at once, with EAGAIN when there is nothing to do, and the
// netpoller waits. The runtime's entersyscall and exitsyscall, which
// syscall.Syscall wraps around each call, exist for calls that may block:
// they let another thread take the P. Besides their own cost,
// entersyscall wakes the sysmon thread when it sleeps because every P was
// idle, which is every time a relay or a server wakes from the netpoller
// for a datagram or a short message: on a busy 2-CPU machine that wake is
// a futex call and a context switch each time. A UDP ping-pong through the
// relay took 19.5 µs at the median with syscall.Syscall6 and 16.7 µs with
// raw calls (bench RelayUDP/mode=pingpong, all of it pinned to one CPU).
//
// Only calls that cannot block may be raw: a raw call holds its P, and
// every goroutine queued on it, until it returns. A regular file's read
// may wait for the disk, so it is never made here. Package splice makes
// its calls raw for a proxy's copy (no limit, two sockets of package
// net): there each wait for the next burst let sysmon sleep and the next
// splice woke it, and on an iperf3 stream through the relay the sysmon
// thread took 18% of the relay's CPU. Its bounded copies keep
// syscall.Syscall (see netSocket in package splice for why).
//
// The package is Linux-only; on other GOOS it is empty.
package nbsys
