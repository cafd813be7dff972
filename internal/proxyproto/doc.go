// Package proxyproto reads and writes PROXY protocol headers, versions 1
// (text) and 2 (binary), so that the relay can pass a client's address on
// to its targets and learn it from a load balancer in front of it. The
// format is HAProxy's specification,
// https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt.
//
// # Reading
//
// [ReadHeader] consumes exactly the header's bytes from a stream and no
// more, so the connection can afterwards be handed to splice(2) with nothing
// buffered in user space. [Parse] decodes the same from the bytes an
// event loop has read so far, and says when it needs more. Both are
// strict: a header that is not exactly what the specification allows is
// refused with an error wrapping [ErrInvalid], and nothing the network
// sends makes them panic (the fuzz test drives both).
//
// # Writing
//
// [AppendV1] and [AppendV2] append a header describing a connection from
// src to dst. Addresses that are not IP (a Unix socket client) are sent as
// "UNKNOWN" (v1) or AF_UNSPEC (v2), as the specification prescribes.
package proxyproto
