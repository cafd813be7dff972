// Package udp moves UDP datagrams in batches with zero allocations per call,
// [netip.AddrPort] addresses, and the kernel's segmentation (GSO) and
// receive (GRO) offloads.
//
// # Conn
//
// A [Conn] wraps a *net.UDPConn ([Listen] opens one, [NewConn] wraps one you
// have) and has its methods, so it can be handed to code written for
// *net.UDPConn, [net.PacketConn] or [net.Conn]. Its read methods (ReadFrom,
// ReadMsgUDP and the others) go through ReadBatch, one datagram each; its
// write methods are package net's. [Conn.ReadBatch] and [Conn.WriteBatch]
// move a slice of [Message] values per call: on Linux one recvmmsg(2) or
// sendmmsg(2), through Go's netpoller, so deadlines hold and Close wakes a
// blocked reader with an error matching [net.ErrClosed]. Neither
// allocates: the syscall scratch (headers, iovecs, sockaddrs, control
// buffers) is pooled and the netpoller callback is bound once. A partial
// sendmmsg is reported exactly; [Conn.WriteAll] sends the rest.
//
// The calls are raw system calls (syscall.RawSyscall6): the sockets of
// package net never block, so the runtime's entersyscall, which lets
// another thread take the P while a call blocks, buys nothing, and it wakes
// the runtime's sysmon thread each time the process comes back from the
// netpoller: a context switch per wake on a busy machine. A call holds its
// P until it returns: microseconds for a few datagrams, longer for a batch
// of hundreds without offload; other Ps go on running.
//
// # Offload
//
// GSO: WriteBatch coalesces runs of messages to one destination whose sizes
// are equal (the last may be shorter) into one UDP_SEGMENT send of at most
// 64 datagrams and 65,507 bytes, pointing one iovec at each payload, or a
// single one at the whole run when its payloads are sub-slices of one
// array, back to back (which the kernel copies fastest), never copying
// them. If the kernel answers a GSO send with EIO, GSO is switched off
// for the Conn and the datagrams are resent without it. GSO is a per-send
// control message, never a socket option: Write, WriteTo and WriteMsgUDP
// send exactly what they are given, a caller's own UDP_SEGMENT message
// included.
//
// GRO: with UDP_GRO on, the kernel may deliver up to 64 datagrams of one
// flow as one buffer. ReadBatch splits it into one Message per datagram,
// each with its own source address, packet info and TOS. Once ReadBatch
// knows the flow's datagram size, the kernel writes each datagram straight
// into a Message.Buf; with 64 KiB Bufs, uncoalesced datagrams from many
// peers arrive zero-copy and many per call, as without GRO. ReadBatch may
// exchange Buf slices among the Messages to keep them in order; it never
// substitutes a buffer of its own. Otherwise coalesced datagrams land in
// internal 64 KiB buffers and are copied once. Either way a Buf needs only
// be as large as the datagrams it receives: GRO asks no larger buffers of
// the caller, though 64 KiB ones avoid the copies.
//
// Both are probed on the socket and on by default; turn them off with
// [Options] (DisableGSO, DisableGRO) or the environment (ZEROIO_UDP_GSO=0,
// ZEROIO_UDP_GRO=0). [Conn.Stats] tells which are in use.
//
// # Who reads the socket: GRO and hand-outs
//
// Every read of a Conn returns exactly one datagram as it was sent,
// whoever makes it. GRO is on only while the Conn's own methods are the
// socket's only reader:
//
//   - The Conn's first read (ReadBatch or a read method) turns UDP_GRO on.
//     Until then it is off.
//   - [Conn.SyscallConn] and [Conn.File] hand the socket out to readers
//     that do not split GRO buffers (recvmsg or recvmmsg of their own,
//     x/net's ipv4.PacketConn.ReadBatch, quic-go): they turn UDP_GRO off
//     for good first. A socket handed out before the Conn's first read
//     (as quic-go and x/net do when they are given the Conn) never has
//     GRO on. [Conn.Control] sets socket options without handing out.
//   - Datagrams the kernel coalesced before the switch keep their segment
//     size only while UDP_GRO is on, so the hand-out first reads what the
//     socket holds, without waiting, and splits it: those datagrams are
//     returned by the Conn's own read methods, before anything read
//     later, and never reach the new reader merged.
//   - A read of the Conn waiting for a datagram at that moment is woken
//     (with a read deadline in the past, which the hand-out then puts
//     back as the caller set it), so that the hand-out can read ahead;
//     the read then goes on waiting and returns no error of the switch.
//
// After the switch the kernel coalesces nothing more for the socket: it
// no longer merges the flow's packets and splits a GSO send from a local
// sender before queueing it.
//
// # Packet info and ECN
//
// With [Options].PacketInfo, reads report the local address a datagram was
// sent to ([Message].Local): a server bound to 0.0.0.0 or [::] sets Local
// on its reply and answers from the address it was reached on. With
// [Options].ECN, reads report the TOS / traffic class byte; writes send
// [Message].TOS when it is not 0.
//
// # Addresses
//
// IPv4, IPv6 and dual-stack sockets work alike; IPv4-mapped IPv6 addresses
// are reported as IPv4, and IPv4 destinations are mapped for a dual-stack
// socket.
//
// # Other platforms
//
// On GOOS other than linux the same API works one datagram per system call
// through package net: ReadBatch returns one datagram, WriteBatch sends each
// in turn, and GSO, GRO, PacketInfo and ECN are off. On plan9, whose package
// net has no ReadMsgUDP or WriteMsgUDP, Messages without OOB go through its
// ReadFrom and WriteTo.
package udp
