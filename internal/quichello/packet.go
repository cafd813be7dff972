// Package quichello reads what an L4 relay needs from QUIC packets without
// terminating QUIC: the long header (version and connection IDs), the
// destination connection ID of a short-header packet, and the TLS
// ClientHello that a client carries in its Initial packets, which it
// decrypts with the version's initial keys (RFC 9001, 5.2; RFC 9369, 3.3)
// and reassembles from CRYPTO frames spread over several packets and
// datagrams, in any order.
//
// Nothing here writes to a packet: a relay forwards the datagrams it was
// given unchanged. Every parser is bounded and never panics on any input.
package quichello

import (
	"encoding/binary"
	"errors"
)

// Versions whose Initial packets [Hello] can read.
const (
	Version1 uint32 = 0x00000001 // RFC 9000
	Version2 uint32 = 0x6b3343cf // RFC 9369
)

// MaxConnIDLen is the longest connection ID QUIC v1 and v2 allow
// (RFC 9000, 17.2).
const MaxConnIDLen = 20

// Packet types of a long header, named by what they are: their bits on the
// wire differ between versions (RFC 9369, 3.2).
const (
	TypeInitial uint8 = iota
	Type0RTT
	TypeHandshake
	TypeRetry
	TypeUnknown // a version this package does not know
)

// Errors a datagram can be refused with. They compare with ==.
var (
	ErrNotQUIC     = errors.New("quichello: not a QUIC long-header packet")
	ErrVersion     = errors.New("quichello: QUIC version not supported")
	ErrMalformed   = errors.New("quichello: malformed QUIC packet")
	ErrNotInitial  = errors.New("quichello: no client Initial packet in datagram")
	ErrDecrypt     = errors.New("quichello: Initial packet does not decrypt")
	ErrTooLarge    = errors.New("quichello: ClientHello larger than the bound")
	ErrTooMany     = errors.New("quichello: too many Initial packets without a whole ClientHello")
	ErrNeedMore    = errors.New("quichello: ClientHello incomplete, more Initial packets needed")
	ErrNotTLSHello = errors.New("quichello: CRYPTO stream does not start with a ClientHello")
)

// LongHeader is a parsed long-header packet (RFC 9000, 17.2). Its slices
// point into the datagram it was parsed from.
type LongHeader struct {
	Version uint32
	// Type is TypeInitial, Type0RTT, TypeHandshake or TypeRetry for
	// versions 1 and 2, TypeUnknown for any other (whose fields after the
	// connection IDs are not parsed; Len is then the whole datagram).
	Type      uint8
	DstConnID []byte
	SrcConnID []byte
	Token     []byte // Initial packets only
	PNOffset  int    // where the protected packet number starts
	Len       int    // the packet's length: the next coalesced packet starts there
}

// IsLong reports whether b starts with a long-header packet.
func IsLong(b []byte) bool { return len(b) > 0 && b[0]&0x80 != 0 }

// ShortConnID returns the destination connection ID of a short-header
// packet whose connection IDs are n bytes long: it has no length on the
// wire (RFC 9000, 17.3), so the relay must know n.
func ShortConnID(b []byte, n int) ([]byte, bool) {
	if len(b) < 1+n || b[0]&0x80 != 0 || n > MaxConnIDLen {
		return nil, false
	}
	return b[1 : 1+n], true
}

// packetType turns a long header's type bits into a Type.
func packetType(version uint32, bits byte) uint8 {
	switch version {
	case Version1:
		return bits // Initial 0, 0-RTT 1, Handshake 2, Retry 3
	case Version2:
		return (bits + 3) & 3 // Initial 1, 0-RTT 2, Handshake 3, Retry 0
	}
	return TypeUnknown
}

// ParseLong parses the long-header packet at the start of b.
func ParseLong(b []byte) (LongHeader, error) {
	var h LongHeader
	if !IsLong(b) {
		return h, ErrNotQUIC
	}
	if len(b) < 7 {
		return h, ErrMalformed
	}
	h.Version = binary.BigEndian.Uint32(b[1:5])
	if h.Version == 0 { // version negotiation: not a client's first flight
		return h, ErrVersion
	}
	p := 5
	var ok bool
	if h.DstConnID, p, ok = connID(b, p); !ok {
		return h, ErrMalformed
	}
	if h.SrcConnID, p, ok = connID(b, p); !ok {
		return h, ErrMalformed
	}
	h.Type = packetType(h.Version, b[0]>>4&3)
	if h.Type == TypeUnknown {
		h.Len = len(b)
		return h, nil
	}
	if b[0]&0x40 == 0 { // the fixed bit (RFC 9000, 17.2)
		return h, ErrMalformed
	}
	if h.Type == TypeRetry {
		h.Len = len(b)
		return h, nil
	}
	if h.Type == TypeInitial {
		n, q, ok := varint(b, p)
		if !ok || uint64(len(b)-q) < n {
			return h, ErrMalformed
		}
		h.Token = b[q : q+int(n)]
		p = q + int(n)
	}
	n, p, ok := varint(b, p)
	if !ok || uint64(len(b)-p) < n {
		return h, ErrMalformed
	}
	h.PNOffset = p
	h.Len = p + int(n)
	return h, nil
}

// connID reads a length-prefixed connection ID at b[p:].
func connID(b []byte, p int) ([]byte, int, bool) {
	if p >= len(b) {
		return nil, p, false
	}
	n := int(b[p])
	p++
	if n > MaxConnIDLen || len(b)-p < n {
		return nil, p, false
	}
	return b[p : p+n], p + n, true
}

// varint reads a variable-length integer (RFC 9000, 16) at b[p:].
func varint(b []byte, p int) (uint64, int, bool) {
	if p >= len(b) {
		return 0, p, false
	}
	n := 1 << (b[p] >> 6)
	if len(b)-p < n {
		return 0, p, false
	}
	v := uint64(b[p] & 0x3f)
	for i := 1; i < n; i++ {
		v = v<<8 | uint64(b[p+i])
	}
	return v, p + n, true
}
