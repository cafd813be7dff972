// Package sockaddr converts between socket addresses in the kernel's
// layout and [netip.AddrPort] without allocating, for the raw system
// calls of packages internal/nbsys (accept, connect, getsockname) and
// internal/udpsys (recvmmsg, sendmmsg names).
//
// [Inet] is storage for an IPv4 or IPv6 address, sized for the
// per-message arrays of recvmmsg and sendmmsg; [Addr] holds any family a
// stream socket connects to, Unix paths included.
//
// Everything here is Linux-only; on other GOOS the package is empty.
package sockaddr
