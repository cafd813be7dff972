// Package tlshello reads the server name (SNI) and the ALPN protocols of a
// TLS ClientHello from the first bytes a client sent, without consuming
// them: a relay peeks at them, picks a route, and forwards them unchanged.
//
// [Parse] is incremental in the simplest way: it is given everything read
// so far and answers from scratch each time, so a hello split across TCP
// segments or across TLS records is parsed once enough has arrived. It is
// bounded ([DefaultMaxLen], or the limit given to [ParseLimit]), allocates
// nothing, and never panics on any input.
package tlshello

// DefaultMaxLen bounds the bytes a hello may occupy, record headers
// included: 16 KiB, the largest TLS plaintext record (RFC 8446, 5.1). A
// ClientHello is usually under 2 KiB, a post-quantum key share included.
const DefaultMaxLen = 16 << 10

// Limits of what an [Info] holds.
const (
	// MaxNameLen is the longest server name accepted: a DNS name is at
	// most 253 bytes (RFC 1035, 2.3.4), 255 with room to spare.
	MaxNameLen = 255
	// MaxALPN and MaxALPNBytes bound the ALPN protocols kept: the first
	// MaxALPN that fit in MaxALPNBytes. Browsers offer two or three.
	MaxALPN      = 16
	MaxALPNBytes = 512
)

// Error is why a hello could not be read. Its values compare with ==.
type Error uint8

const (
	// ErrNeedMore means the bytes so far are a valid start of a
	// ClientHello: read more and call Parse again.
	ErrNeedMore Error = iota + 1
	// ErrNotTLS means the first bytes are not a TLS handshake record:
	// the client speaks another protocol (or sent nothing usable).
	ErrNotTLS
	// ErrMalformed means the bytes start like TLS but are not a valid
	// ClientHello.
	ErrMalformed
	// ErrTooLarge means the hello does not fit in the bound.
	ErrTooLarge
)

func (e Error) Error() string {
	switch e {
	case ErrNeedMore:
		return "tlshello: incomplete ClientHello"
	case ErrNotTLS:
		return "tlshello: not a TLS handshake"
	case ErrMalformed:
		return "tlshello: malformed ClientHello"
	case ErrTooLarge:
		return "tlshello: ClientHello too large"
	}
	return "tlshello: unknown error"
}

// Info is what Parse found in a ClientHello. It holds copies (a hello
// split across records has no contiguous field to point into), in fixed
// arrays, so that a caller can keep one per connection or on its stack and
// parse into it without allocating.
type Info struct {
	// Version is the hello's legacy_version (0x0303 for TLS 1.2 and 1.3).
	Version uint16
	// Len is the number of bytes the hello occupies, record headers
	// included: the bytes a relay must forward before anything else.
	Len int

	name    [MaxNameLen]byte
	nameLen uint8
	hasName bool

	alpn    [MaxALPNBytes]byte
	alpnEnd [MaxALPN]uint16 // end offset of each protocol in alpn
	alpnN   uint8
}

// ServerName returns the first host_name of the server_name extension,
// lower-cased and without a trailing dot, or nil if there is none. It
// points into h.
func (h *Info) ServerName() []byte {
	if !h.hasName {
		return nil
	}
	return h.name[:h.nameLen]
}

// NumALPN returns the number of ALPN protocols kept, in the client's order
// of preference.
func (h *Info) NumALPN() int { return int(h.alpnN) }

// ALPN returns the i'th ALPN protocol; it points into h.
func (h *Info) ALPN(i int) []byte {
	start := uint16(0)
	if i > 0 {
		start = h.alpnEnd[i-1]
	}
	return h.alpn[start:h.alpnEnd[i]]
}

// Parse reads a ClientHello from the start of buf, bounded by
// DefaultMaxLen. See ParseLimit.
func Parse(buf []byte, h *Info) error { return ParseLimit(buf, DefaultMaxLen, h) }

// Record and handshake constants (RFC 8446, 5.1 and 4).
const (
	recordHeaderLen    = 5
	maxRecordLen       = 1 << 14
	typeHandshake      = 22
	typeClientHello    = 1
	extServerName      = 0
	extALPN            = 16
	nameTypeHostName   = 0
	handshakeHeaderLen = 4
)

// ParseLimit reads the ClientHello at the start of buf into h. buf is
// every byte read from the client so far; bytes after the hello are
// ignored. It returns nil when h is filled in, ErrNeedMore when buf is a
// valid but incomplete start, or ErrNotTLS, ErrMalformed or ErrTooLarge.
// A hello that would need more than limit bytes (record headers included)
// is ErrTooLarge as soon as its length is known, and so is an incomplete
// one once buf holds limit bytes.
func ParseLimit(buf []byte, limit int, h *Info) error {
	*h = Info{}
	if limit <= 0 {
		limit = DefaultMaxLen
	}
	if len(buf) == 0 {
		return ErrNeedMore
	}
	if buf[0] != typeHandshake {
		return ErrNotTLS
	}
	if len(buf) >= 2 && buf[1] != 3 { // TLS 1.0 to 1.3 records say 3.x
		return ErrNotTLS
	}
	r := reader{buf: buf, limit: limit}
	err := r.parse(h)
	if err == ErrNeedMore && len(buf) >= limit {
		return ErrTooLarge
	}
	return err
}

// reader walks the handshake bytes carried by a run of TLS records,
// skipping their headers. Every read checks its bounds.
type reader struct {
	buf   []byte
	limit int
	pos   int  // next handshake byte, an offset in buf
	end   int  // end of the current record's payload in buf
	left  int  // handshake bytes of the ClientHello not yet read
	plain bool // no record layer: the message starts at buf[0]
}

// next moves pos to the start of the next record's payload.
func (r *reader) next() error {
	hdr := r.end
	if len(r.buf)-hdr < recordHeaderLen {
		return ErrNeedMore
	}
	b := r.buf[hdr:]
	if b[0] != typeHandshake || b[1] != 3 {
		return ErrMalformed
	}
	n := int(b[3])<<8 | int(b[4])
	// Handshake records may not be empty (RFC 8446, 5.1), nor longer
	// than 2^14 bytes.
	if n == 0 || n > maxRecordLen {
		return ErrMalformed
	}
	r.pos = hdr + recordHeaderLen
	r.end = r.pos + n
	return nil
}

// byte1 reads one handshake byte, crossing into the next record if need be.
func (r *reader) byte1() (byte, error) {
	if r.left <= 0 {
		return 0, ErrMalformed
	}
	for r.pos >= r.end {
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	if r.pos >= len(r.buf) {
		return 0, ErrNeedMore
	}
	c := r.buf[r.pos]
	r.pos++
	r.left--
	return c, nil
}

func (r *reader) uint16() (int, error) {
	a, err := r.byte1()
	if err != nil {
		return 0, err
	}
	b, err := r.byte1()
	return int(a)<<8 | int(b), err
}

// skip passes over n handshake bytes.
func (r *reader) skip(n int) error {
	if n > r.left {
		return ErrMalformed
	}
	for n > 0 {
		for r.pos >= r.end {
			if err := r.next(); err != nil {
				return err
			}
		}
		k := min(n, r.end-r.pos)
		if r.pos+k > len(r.buf) {
			return ErrNeedMore
		}
		r.pos += k
		r.left -= k
		n -= k
	}
	return nil
}

// vector reads a length of lenBytes (1 or 2) bytes and checks that the
// vector it announces fits what is left of the message.
func (r *reader) vector(lenBytes int) (int, error) {
	var n int
	var err error
	if lenBytes == 1 {
		var c byte
		c, err = r.byte1()
		n = int(c)
	} else {
		n, err = r.uint16()
	}
	if err == nil && n > r.left {
		err = ErrMalformed
	}
	return n, err
}

func (r *reader) parse(h *Info) error {
	// The first record: its header, then the handshake header, which
	// may itself be split across records.
	r.left = handshakeHeaderLen
	var hdr [handshakeHeaderLen]byte
	for i := range hdr {
		c, err := r.byte1()
		if err != nil {
			return err
		}
		hdr[i] = c
	}
	if hdr[0] != typeClientHello {
		return ErrMalformed
	}
	body := int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
	// The fewest bytes the hello can take: its records at their fullest.
	records := (handshakeHeaderLen + body + maxRecordLen - 1) / maxRecordLen
	if r.plain {
		records = 0
	}
	if records*recordHeaderLen+handshakeHeaderLen+body > r.limit {
		return ErrTooLarge
	}
	r.left = body
	if err := r.clientHello(h); err != nil {
		return err
	}
	if r.left != 0 {
		return ErrMalformed
	}
	if r.pos > r.limit { // split into more records than the bound holds
		return ErrTooLarge
	}
	h.Len = r.pos
	return nil
}

// skipVector passes over a vector whose length takes lenBytes bytes and
// must lie in [least, most] and be a multiple of unit.
func (r *reader) skipVector(lenBytes, least, most, unit int) error {
	n, err := r.vector(lenBytes)
	if err != nil {
		return err
	}
	if n < least || n > most || n%unit != 0 {
		return ErrMalformed
	}
	return r.skip(n)
}

// clientHello reads the ClientHello body (RFC 8446, 4.1.2; RFC 5246,
// 7.4.1.2, whose extensions are optional).
func (r *reader) clientHello(h *Info) error {
	v, err := r.uint16()
	if err != nil {
		return err
	}
	h.Version = uint16(v)
	if err := r.skip(32); err != nil { // random
		return err
	}
	if err := r.skipVector(1, 0, 32, 1); err != nil { // legacy_session_id<0..32>
		return err
	}
	if err := r.skipVector(2, 2, 1<<16-2, 2); err != nil { // cipher_suites<2..2^16-2>
		return err
	}
	if err := r.skipVector(1, 1, 1<<8-1, 1); err != nil { // legacy_compression_methods<1..2^8-1>
		return err
	}
	if r.left == 0 { // no extensions (TLS 1.2 and earlier)
		return nil
	}
	n, err := r.vector(2) // extensions<8..2^16-1>
	if err != nil {
		return err
	}
	if n != r.left {
		return ErrMalformed
	}
	var seenName, seenALPN bool
	for r.left > 0 {
		typ, err := r.uint16()
		if err != nil {
			return err
		}
		n, err := r.vector(2)
		if err != nil {
			return err
		}
		switch typ {
		case extServerName:
			if seenName {
				return ErrMalformed // an extension may appear once (RFC 8446, 4.2)
			}
			seenName = true
			err = r.serverName(h, n)
		case extALPN:
			if seenALPN {
				return ErrMalformed
			}
			seenALPN = true
			err = r.alpn(h, n)
		default:
			err = r.skip(n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// extList reads the two-byte length of the list that an extension of n
// bytes holds: the list must fill the extension and be at least least
// bytes long. It returns the value r.left will have at the extension's
// end.
func (r *reader) extList(n, least int) (stop int, err error) {
	if n < 2 {
		return 0, ErrMalformed
	}
	stop = r.left - n
	list, err := r.vector(2)
	if err != nil {
		return 0, err
	}
	if list < least || list != n-2 {
		return 0, ErrMalformed
	}
	return stop, nil
}

// serverName reads a server_name extension of n bytes (RFC 6066, 3): the
// first host_name is kept, others skipped.
func (r *reader) serverName(h *Info, n int) error {
	stop, err := r.extList(n, 1)
	if err != nil {
		return err
	}
	for r.left > stop {
		typ, err := r.byte1()
		if err != nil {
			return err
		}
		l, err := r.vector(2)
		if err != nil {
			return err
		}
		if r.left-l < stop {
			return ErrMalformed
		}
		if typ != nameTypeHostName || h.hasName {
			if err := r.skip(l); err != nil {
				return err
			}
			continue
		}
		if l == 0 || l > MaxNameLen {
			return ErrMalformed
		}
		for i := 0; i < l; i++ {
			c, err := r.byte1()
			if err != nil {
				return err
			}
			// A host name is ASCII (RFC 6066, 3): letters, digits, '-',
			// '.', and '_' seen in the wild. Anything else (a control
			// byte, a space, UTF-8) is refused rather than matched or
			// logged.
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.', c == '_':
			default:
				return ErrMalformed
			}
			h.name[i] = c
		}
		if h.name[l-1] == '.' { // an absolute name: match it without the dot
			l--
		}
		if l == 0 {
			return ErrMalformed
		}
		h.nameLen = uint8(l)
		h.hasName = true
	}
	return nil
}

// alpn reads an application_layer_protocol_negotiation extension of n
// bytes (RFC 7301, 3.1), keeping the protocols that fit in h.
func (r *reader) alpn(h *Info, n int) error {
	stop, err := r.extList(n, 2)
	if err != nil {
		return err
	}
	off := 0
	for r.left > stop {
		l, err := r.vector(1)
		if err != nil {
			return err
		}
		if l == 0 || r.left-l < stop {
			return ErrMalformed
		}
		if int(h.alpnN) == MaxALPN || off+l > MaxALPNBytes {
			if err := r.skip(l); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < l; i++ {
			c, err := r.byte1()
			if err != nil {
				return err
			}
			h.alpn[off+i] = c
		}
		off += l
		h.alpnEnd[h.alpnN] = uint16(off)
		h.alpnN++
	}
	return nil
}
