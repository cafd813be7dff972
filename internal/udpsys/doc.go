// Package udpsys is the raw Linux syscall plumbing under package udp:
// recvmmsg and sendmmsg over [unix.Mmsghdr] slices (their names are
// package internal/sockaddr's), and building and parsing the control
// messages for UDP_SEGMENT, UDP_GRO, IP_PKTINFO / IPV6_PKTINFO and
// IP_TOS / IPV6_TCLASS.
//
// Everything here is Linux-only; on other GOOS the package is empty and
// package udp falls back to one datagram per call through package net.
package udpsys
