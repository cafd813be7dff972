package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The hand-over's wire format. Every message is a frame: a 16-byte
// header, then its payload; the descriptors it carries ride with its
// bytes as one SCM_RIGHTS control message. Integers are big-endian.
//
//	magic   "ZIOH"
//	version u16   handOverVersion; a peer speaking another is refused
//	type    u8    frParts, frEnd, frReady, frCommit, frDone, frAbort
//	_       u8
//	nfds    u16   descriptors carried, at most maxFrameFDs
//	_       u16
//	length  u32   payload bytes, at most maxFramePayload
//
// A frParts payload is a run of records, each
//
//	kind u8 | nfds u16 | length u32 | body
//
// whose descriptors are the next nfds of the frame's, in order: a frame
// carries exactly the descriptors its records use. frEnd's payload counts
// the records and descriptors sent; frAbort's is a reason, in text.
const (
	handOverMagic   = "ZIOH"
	handOverVersion = 1
	frameHeaderLen  = 16
	// maxFrameFDs stays under the kernel's SCM_MAX_FD (253): the
	// descriptors of one sendmsg(2) (unix(7)).
	maxFrameFDs = 250
	// maxFramePayload bounds what a receiver allocates for one frame; a
	// sender starts a new frame well before it (framePayloadGoal).
	maxFramePayload  = 8 << 20
	framePayloadGoal = 1 << 20
	recordHeaderLen  = 7
)

// Frame types.
const (
	frParts  uint8 = 1 + iota // records and their descriptors
	frEnd                     // the last frame of the state: counts
	frReady                   // the receiver built everything
	frCommit                  // the sender lets go: the receiver takes over
	frDone                    // the receiver has taken over
	frAbort                   // either side gives up: the reason
)

// Record kinds.
const (
	recListener uint8 = 1 + iota // a front's or a UDP route's listening sockets
	recStream                    // an event engine stream
	recSession                   // a UDP session
)

var errBadFrame = errors.New("malformed hand-over frame")

// frameHeader is a decoded frame header.
type frameHeader struct {
	typ  uint8
	nfds int
	n    int
}

func appendFrameHeader(b []byte, typ uint8, n, nfds int) []byte {
	b = append(b, handOverMagic...)
	b = binary.BigEndian.AppendUint16(b, handOverVersion)
	b = append(b, typ, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(nfds))
	b = binary.BigEndian.AppendUint16(b, 0)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// parseFrameHeader decodes a frame header, refusing another protocol or
// version, an unknown type and counts over the bounds.
func parseFrameHeader(b []byte) (frameHeader, error) {
	var h frameHeader
	if len(b) < frameHeaderLen || string(b[:4]) != handOverMagic {
		return h, errors.New("peer does not speak the zeroio hand-over protocol")
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != handOverVersion {
		return h, fmt.Errorf("peer speaks hand-over protocol version %d, this relay version %d", v, handOverVersion)
	}
	h.typ = b[6]
	h.nfds = int(binary.BigEndian.Uint16(b[8:]))
	h.n = int(binary.BigEndian.Uint32(b[12:]))
	switch {
	case h.typ < frParts || h.typ > frAbort:
		return h, fmt.Errorf("%w: type %d", errBadFrame, h.typ)
	case h.nfds > maxFrameFDs:
		return h, fmt.Errorf("%w: %d descriptors", errBadFrame, h.nfds)
	case h.n > maxFramePayload:
		return h, fmt.Errorf("%w: %d bytes", errBadFrame, h.n)
	case h.nfds > 0 && h.typ != frParts:
		return h, fmt.Errorf("%w: descriptors on a frame of type %d", errBadFrame, h.typ)
	}
	return h, nil
}

// record is one record of a frParts payload: its body, and its
// descriptors as indexes into the frame's.
type record struct {
	kind     uint8
	body     []byte
	fd0, nfd int
}

// splitRecords splits a frParts payload carrying nfds descriptors into
// its records, checking that they use exactly those descriptors.
func splitRecords(p []byte, nfds int) ([]record, error) {
	var rs []record
	used := 0
	for len(p) > 0 {
		if len(p) < recordHeaderLen {
			return nil, fmt.Errorf("%w: a record cut short", errBadFrame)
		}
		r := record{kind: p[0], nfd: int(binary.BigEndian.Uint16(p[1:])), fd0: used}
		n := binary.BigEndian.Uint32(p[3:])
		p = p[recordHeaderLen:]
		if uint64(n) > uint64(len(p)) {
			return nil, fmt.Errorf("%w: a record longer than its frame", errBadFrame)
		}
		if used += r.nfd; used > nfds {
			return nil, fmt.Errorf("%w: records use more descriptors than the frame carries", errBadFrame)
		}
		r.body, p = p[:n], p[n:]
		rs = append(rs, r)
	}
	if used != nfds {
		return nil, fmt.Errorf("%w: %d descriptors carried, %d used", errBadFrame, nfds, used)
	}
	return rs, nil
}

// appendRecord appends a record of kind with nfd descriptors; body is
// written by fill, after the header.
func appendRecord(b []byte, kind uint8, nfd int, fill func([]byte) []byte) []byte {
	at := len(b)
	b = append(b, kind, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(b[at+1:], uint16(nfd))
	b = fill(b)
	binary.BigEndian.PutUint32(b[at+3:], uint32(len(b)-at-recordHeaderLen))
	return b
}

// wire decodes a record body: each read past the end, or of a length
// over what is left, sets err and returns zero values from then on.
type wire struct {
	b   []byte
	err error
}

func (w *wire) take(n int) []byte {
	if w.err != nil {
		return nil
	}
	if n < 0 || n > len(w.b) {
		w.err = fmt.Errorf("%w: a record cut short", errBadFrame)
		w.b = nil
		return nil
	}
	v := w.b[:n]
	w.b = w.b[n:]
	return v
}

func (w *wire) u32() uint32 {
	if v := w.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

// bytes reads a u32-prefixed byte string, a copy.
func (w *wire) bytes() []byte {
	n := w.u32()
	if uint64(n) > uint64(len(w.b)) {
		w.take(len(w.b) + 1)
		return nil
	}
	return append([]byte(nil), w.take(int(n))...)
}

func (w *wire) str() string { return string(w.bytes()) }

// done reports the first error, or one for bytes left over.
func (w *wire) done() error {
	if w.err == nil && len(w.b) > 0 {
		return fmt.Errorf("%w: %d bytes past a record's end", errBadFrame, len(w.b))
	}
	return w.err
}

func putU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

func putStr(b []byte, v string) []byte { return append(putU32(b, uint32(len(v))), v...) }

// listenerRec is a recListener: listening sockets of a stream front or
// of a UDP route, as many as the record's descriptors, named after a
// route that used them (Server.Inherit matches them by it, or by their
// address).
type listenerRec struct {
	name string
}

func (r *listenerRec) append(b []byte) []byte { return putStr(b, r.name) }

func decodeListener(body []byte) (listenerRec, error) {
	w := wire{b: body}
	r := listenerRec{name: w.str()}
	return r, w.done()
}

// endRec is frEnd's payload.
func appendEnd(b []byte, records, fds int) []byte {
	return putU32(putU32(b, uint32(records)), uint32(fds))
}

func decodeEnd(p []byte) (records, fds int, err error) {
	w := wire{b: p}
	records, fds = int(w.u32()), int(w.u32())
	return records, fds, w.done()
}
