package tlshello

// ParseHandshake reads a ClientHello handshake message that is not framed
// in TLS records: the first bytes of a QUIC connection's CRYPTO stream,
// where TLS messages travel without a record layer (RFC 9001, 4). It
// answers as [ParseLimit] does; ErrNotTLS means the first byte is not a
// ClientHello's type, and Info.Len is the message's length.
func ParseHandshake(buf []byte, limit int, h *Info) error {
	*h = Info{}
	if limit <= 0 {
		limit = DefaultMaxLen
	}
	if len(buf) == 0 {
		return ErrNeedMore
	}
	if buf[0] != typeClientHello {
		return ErrNotTLS
	}
	// One record as long as the limit: next is never called, and a
	// message past the limit is found too large as a framed one is.
	r := reader{buf: buf, limit: limit, end: limit, plain: true}
	err := r.parse(h)
	if err == ErrNeedMore && len(buf) >= limit {
		return ErrTooLarge
	}
	return err
}
