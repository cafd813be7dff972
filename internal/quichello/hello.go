package quichello

import "github.com/zeroio/zeroio/internal/tlshello"

// Bounds of a [Hello] with zero fields.
const (
	// DefaultMaxPackets is how many Initial packets a client may send
	// before its ClientHello is whole. A hello with a post-quantum key
	// share takes two; a few more leave room for retransmissions.
	DefaultMaxPackets = 8
	// maxRanges bounds the disjoint pieces of the CRYPTO stream held
	// while earlier pieces are missing.
	maxRanges = 8
)

// Hello reassembles the ClientHello a QUIC client sends in the CRYPTO
// frames of its Initial packets. Give it each datagram the client sends
// ([Hello.Add]) until it answers nil: the hello is then in the Info. It
// holds the CRYPTO bytes that arrived ahead of a missing piece, so
// datagrams may come in any order. The zero Hello is ready to use; it
// holds its bytes in buffers of its own, so a caller keeps one per client
// still choosing a route, and drops it (or calls Reset) when done.
type Hello struct {
	// MaxLen bounds the ClientHello (tlshello.DefaultMaxLen if zero);
	// MaxPackets the Initial packets it may take (DefaultMaxPackets if
	// zero).
	MaxLen, MaxPackets int

	version uint32
	dcid    [MaxConnIDLen]byte
	dcidLen uint8
	keys    *keys
	largest int64
	packets int

	crypto  []byte            // the CRYPTO stream's first bytes, as far as any arrived
	ranges  [maxRanges][2]int // received [start, end) pieces, sorted, disjoint
	nRanges int
	scratch []byte
}

// Reset forgets everything but the bounds.
func (h *Hello) Reset() {
	*h = Hello{MaxLen: h.MaxLen, MaxPackets: h.MaxPackets, crypto: h.crypto[:0], scratch: h.scratch[:0]}
}

// Version is the QUIC version of the client's packets (0 before the first
// one is taken).
func (h *Hello) Version() uint32 { return h.version }

// ConnID is the destination connection ID of the client's first Initial
// packet: the ID its Initial keys derive from.
func (h *Hello) ConnID() []byte { return h.dcid[:h.dcidLen] }

// Add takes one datagram from the client. It returns nil once the
// ClientHello is whole (filling info), ErrNeedMore while a part is
// missing, or why the datagram cannot be part of a client's first flight:
// ErrNotQUIC, ErrVersion, ErrMalformed, ErrNotInitial, ErrDecrypt,
// ErrNotTLSHello, ErrTooLarge or ErrTooMany. After an error other than
// ErrNeedMore, later datagrams may still complete the hello (a forged or
// corrupt datagram does not spoil the real ones) unless the error is
// ErrTooLarge or ErrTooMany.
func (h *Hello) Add(datagram []byte, info *tlshello.Info) error {
	took := false
	for p := datagram; len(p) > 0 && IsLong(p); {
		lh, err := ParseLong(p)
		if err != nil {
			if took {
				break // a damaged packet after ours: the relay forwards it as it is
			}
			return err
		}
		if lh.Type == TypeUnknown {
			return ErrVersion
		}
		if lh.Type == TypeInitial {
			if err := h.packet(p, &lh); err != nil {
				return err
			}
			took = true
		}
		p = p[lh.Len:]
	}
	if !took {
		if !IsLong(datagram) {
			return ErrNotQUIC
		}
		return ErrNotInitial
	}
	return h.parse(info)
}

// packet opens one Initial packet and takes its frames.
func (h *Hello) packet(p []byte, lh *LongHeader) error {
	if h.keys == nil {
		// A client's first destination ID is at least 8 bytes
		// (RFC 9000, 7.2).
		if len(lh.DstConnID) < 8 {
			return ErrMalformed
		}
		k, err := initialKeys(lh.Version, lh.DstConnID, true)
		if err != nil {
			return ErrDecrypt
		}
		h.keys, h.version, h.largest = k, lh.Version, -1
		h.dcidLen = uint8(copy(h.dcid[:], lh.DstConnID))
	} else if lh.Version != h.version {
		return ErrVersion
	}
	h.packets++
	if h.packets > h.maxPackets() {
		return ErrTooMany
	}
	var plain []byte
	var pn int64
	var err error
	h.scratch, plain, pn, err = h.keys.open(h.scratch, p, lh, h.largest)
	if err != nil {
		return err
	}
	h.largest = max(h.largest, pn)
	return h.frames(plain)
}

func (h *Hello) maxPackets() int {
	if h.MaxPackets > 0 {
		return h.MaxPackets
	}
	return DefaultMaxPackets
}

func (h *Hello) maxLen() int {
	if h.MaxLen > 0 {
		return h.MaxLen
	}
	return tlshello.DefaultMaxLen
}

// Frame types an Initial packet may carry (RFC 9000, 12.4).
const (
	framePadding   = 0x00
	framePing      = 0x01
	frameAck       = 0x02
	frameAckECN    = 0x03
	frameCrypto    = 0x06
	frameCloseQUIC = 0x1c
)

// frames walks an Initial packet's payload, taking its CRYPTO frames.
func (h *Hello) frames(b []byte) error {
	if len(b) == 0 { // a packet carries at least one frame (RFC 9000, 12.4)
		return ErrMalformed
	}
	for p := 0; p < len(b); {
		t := b[p]
		p++
		var ok bool
		switch t {
		case framePadding, framePing:
			continue
		case frameAck, frameAckECN:
			p, ok = skipAck(b, p, t == frameAckECN)
		case frameCrypto:
			p, ok = h.cryptoFrame(b, p)
		case frameCloseQUIC:
			p, ok = skipClose(b, p)
		}
		if !ok {
			return ErrMalformed
		}
		if p < 0 {
			return ErrTooLarge
		}
	}
	return nil
}

// skipAck passes over an ACK frame's fields (RFC 9000, 19.3).
func skipAck(b []byte, p int, ecn bool) (int, bool) {
	var ranges uint64
	var ok bool
	for i := range 4 { // largest, delay, range count, first range
		var v uint64
		if v, p, ok = varint(b, p); !ok {
			return p, false
		}
		if i == 2 {
			ranges = v
		}
	}
	if ranges > uint64(len(b)) { // each range takes two bytes at least
		return p, false
	}
	n := 2 * int(ranges)
	if ecn {
		n += 3
	}
	for range n {
		if _, p, ok = varint(b, p); !ok {
			return p, false
		}
	}
	return p, true
}

// skipClose passes over a CONNECTION_CLOSE frame (RFC 9000, 19.19).
func skipClose(b []byte, p int) (int, bool) {
	var n uint64
	var ok bool
	for range 3 { // error code, frame type, reason length
		if n, p, ok = varint(b, p); !ok {
			return p, false
		}
	}
	if n > uint64(len(b)-p) {
		return p, false
	}
	return p + int(n), true
}

// cryptoFrame takes a CRYPTO frame (RFC 9000, 19.6) at b[p:]. It returns
// a negative position when the data lies past the bound.
func (h *Hello) cryptoFrame(b []byte, p int) (int, bool) {
	off, p, ok := varint(b, p)
	if !ok {
		return p, false
	}
	n, p, ok := varint(b, p)
	if !ok || n > uint64(len(b)-p) {
		return p, false
	}
	if off+n > uint64(h.maxLen()) {
		return -1, true
	}
	if n > 0 && !h.take(int(off), b[p:p+int(n)]) {
		return -1, true
	}
	return p + int(n), true
}

// take copies data to its place in the CRYPTO stream and records the
// range; it reports false when the stream is split into more pieces than
// it holds.
func (h *Hello) take(off int, data []byte) bool {
	end := off + len(data)
	if len(h.crypto) < end {
		h.crypto = append(h.crypto, make([]byte, end-len(h.crypto))...)
	}
	copy(h.crypto[off:end], data)
	// Insert [off, end) and merge what it touches.
	i := 0
	for i < h.nRanges && h.ranges[i][1] < off {
		i++
	}
	j := i
	for j < h.nRanges && h.ranges[j][0] <= end {
		off = min(off, h.ranges[j][0])
		end = max(end, h.ranges[j][1])
		j++
	}
	if i == j && h.nRanges == maxRanges {
		return false
	}
	// Replace ranges[i:j] with the merged one.
	n := copy(h.ranges[i+1:], h.ranges[j:h.nRanges])
	h.ranges[i] = [2]int{off, end}
	h.nRanges = i + 1 + n
	return true
}

// parse reads the ClientHello from the CRYPTO stream's contiguous start.
func (h *Hello) parse(info *tlshello.Info) error {
	have := 0
	if h.nRanges > 0 && h.ranges[0][0] == 0 {
		have = h.ranges[0][1]
	}
	switch tlshello.ParseHandshake(h.crypto[:have], h.maxLen(), info) {
	case nil:
		return nil
	case tlshello.ErrNeedMore:
		return ErrNeedMore
	case tlshello.ErrNotTLS:
		return ErrNotTLSHello
	case tlshello.ErrTooLarge:
		return ErrTooLarge
	}
	return ErrMalformed
}
