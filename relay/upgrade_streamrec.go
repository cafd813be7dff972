package relay

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The hand-over's stream records (recStream), and the decoding they add
// to wire.

func (w *wire) u8() uint8 {
	if v := w.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (w *wire) bool() bool {
	v := w.u8()
	if v > 1 && w.err == nil {
		w.err = fmt.Errorf("%w: a flag of %d", errBadFrame, v)
	}
	return v == 1
}

func putBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func (w *wire) u64() uint64 {
	if v := w.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func putBytes(b, v []byte) []byte      { return append(putU32(b, uint32(len(v))), v...) }

func (w *wire) addrPort() netip.AddrPort {
	var a netip.AddrPort
	if b := w.bytes(); w.err == nil {
		if err := a.UnmarshalBinary(b); err != nil {
			w.err = fmt.Errorf("%w: %v", errBadFrame, err)
		}
	}
	return a
}

func putAddrPort(b []byte, a netip.AddrPort) []byte {
	v, _ := a.MarshalBinary()
	return putBytes(b, v)
}

// streamRec is a recStream: one stream of the event engine. Its
// descriptors are the client's socket, then the target's if relaying,
// then the pipe (read end, write end) of each direction that holds one,
// up first.
//
// A stream still in its prelude (reading a PROXY header or a
// ClientHello, waiting for a slot, resolving or dialing its target) goes
// over as its client's socket and the bytes read from it so far: the
// receiver takes it through its prelude again, dialing anew.
type streamRec struct {
	relaying   bool
	route      string // "" while the front's table has not chosen one
	front      string // a route of the client's front, in the sender
	src, dst   netip.AddrPort
	dstKnown   bool
	proxied    bool
	perClient  bool
	age        int64 // nanoseconds since it was accepted
	target     Addr  // relaying: the target it reached
	upN, downN uint64
	endFirst   uint8
	idle       int64 // its route's idle timeout, nanoseconds
	idleFor    int64 // nanoseconds since bytes last moved
	cHup, tHup bool
	up, down   dirRec
	pace       paceRec
}

// paceRec is a relaying stream's limits (stream.pace): its rates as it
// started with them, and its buckets and deadlines as offsets from the
// moment the record was made (a bucket may be ahead, a deadline past).
type paceRec struct {
	rates         [4]uint64 // UploadRate, DownloadRate, ClientUploadRate, ClientDownloadRate
	endIn         int64     // until MaxDuration ends it; 0: never
	tatIn, waitIn [2]int64  // the stream's own buckets; a paced direction's wait (0: none)
}

func (p *paceRec) append(b []byte) []byte {
	for _, r := range p.rates {
		b = putU64(b, r)
	}
	b = putU64(b, uint64(p.endIn))
	for _, v := range [...]int64{p.tatIn[0], p.tatIn[1], p.waitIn[0], p.waitIn[1]} {
		b = putU64(b, uint64(v))
	}
	return b
}

func (w *wire) pace() paceRec {
	var p paceRec
	for i := range p.rates {
		p.rates[i] = w.u64()
	}
	p.endIn = int64(w.u64())
	p.tatIn = [2]int64{int64(w.u64()), int64(w.u64())}
	p.waitIn = [2]int64{int64(w.u64()), int64(w.u64())}
	return p
}

// dirRec is a direction's state: the bytes in its buffer, or the count
// its pipe holds.
type dirRec struct {
	buf       []byte
	hdr       uint8 // leading bytes of buf that are an outgoing PROXY header
	full      uint8
	hasPipe   bool
	inPipe    uint32
	spliced   bool
	eof, shut bool
	rerr      uint32
}

// maxDirBytes bounds a direction's buffered bytes, over the largest
// buffer an engine holds (a ClientHello's); the receiver checks that
// they fit the buffer it puts them in.
const maxDirBytes = 64 << 10

// nfds is how many descriptors r carries.
func (r *streamRec) nfds() int {
	n := 1
	if r.relaying {
		n++
	}
	if r.up.hasPipe {
		n += 2
	}
	if r.down.hasPipe {
		n += 2
	}
	return n
}

func (r *streamRec) append(b []byte) []byte {
	b = putBool(b, r.relaying)
	b = putStr(putStr(b, r.route), r.front)
	b = putAddrPort(putAddrPort(b, r.src), r.dst)
	b = putBool(putBool(putBool(b, r.dstKnown), r.proxied), r.perClient)
	b = putU64(b, uint64(r.age))
	b = putStr(putStr(b, r.target.Network), r.target.Address)
	b = putU64(putU64(b, r.upN), r.downN)
	b = append(b, r.endFirst)
	b = putU64(putU64(b, uint64(r.idle)), uint64(r.idleFor))
	b = putBool(putBool(b, r.cHup), r.tHup)
	return r.pace.append(r.down.append(r.up.append(b)))
}

func (d *dirRec) append(b []byte) []byte {
	b = putBytes(b, d.buf)
	b = append(b, d.hdr, d.full)
	b = putBool(b, d.hasPipe)
	b = putU32(b, d.inPipe)
	b = putBool(putBool(putBool(b, d.spliced), d.eof), d.shut)
	return putU32(b, d.rerr)
}

func (d *dirRec) empty() bool {
	return len(d.buf) == 0 && !d.hasPipe && d.inPipe == 0 && !d.eof && !d.shut && d.rerr == 0
}

func (w *wire) dir() dirRec {
	d := dirRec{buf: w.bytes(), hdr: w.u8(), full: w.u8(), hasPipe: w.bool(), inPipe: w.u32()}
	d.spliced, d.eof, d.shut = w.bool(), w.bool(), w.bool()
	d.rerr = w.u32()
	return d
}

// decodeStream decodes a recStream body carrying nfd descriptors,
// checking what the receiver relies on: the descriptors it needs, a
// direction's invariants (bytes in its buffer or its pipe, not both), and
// sizes its buffers hold.
func decodeStream(body []byte, nfd int) (streamRec, error) {
	w := wire{b: body}
	r := streamRec{relaying: w.bool(), route: w.str(), front: w.str()}
	r.src, r.dst = w.addrPort(), w.addrPort()
	r.dstKnown, r.proxied, r.perClient = w.bool(), w.bool(), w.bool()
	r.age = int64(w.u64())
	r.target = Addr{Network: w.str(), Address: w.str()}
	r.upN, r.downN = w.u64(), w.u64()
	r.endFirst = w.u8()
	r.idle, r.idleFor = int64(w.u64()), int64(w.u64())
	r.cHup, r.tHup = w.bool(), w.bool()
	r.up, r.down = w.dir(), w.dir()
	r.pace = w.pace()
	if err := w.done(); err != nil {
		return r, err
	}
	bad := func(what string) (streamRec, error) {
		return r, fmt.Errorf("%w: stream %s", errBadFrame, what)
	}
	switch {
	case r.nfds() != nfd:
		return bad("descriptors miscounted")
	case !r.relaying && (r.route == "" && r.front == "" || !r.down.empty() || r.up.hasPipe || r.up.hdr != 0):
		return bad("prelude state")
	case r.relaying && r.route == "":
		return bad("without a route")
	case r.age < 0 || r.idle < 0 || r.idleFor < 0 || r.pace.endIn < 0 || r.pace.waitIn[0] < 0 || r.pace.waitIn[1] < 0:
		return bad("times")
	case !r.relaying && r.pace != (paceRec{}):
		return bad("limits before relaying")
	}
	for _, d := range []*dirRec{&r.up, &r.down} {
		switch {
		case len(d.buf) > maxDirBytes, int(d.hdr) > len(d.buf):
			return bad("buffer")
		case d.hasPipe != (d.inPipe > 0), d.hasPipe && len(d.buf) > 0:
			return bad("pipe")
		case d.inPipe > 1<<30, d.rerr > 1<<16:
			return bad("counts")
		}
	}
	return r, nil
}
