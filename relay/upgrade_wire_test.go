package relay

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzHandOverRecords: whatever a peer sends as a frame's payload and
// descriptor count, decoding returns records or an error, never panics,
// and hands out each descriptor to exactly one record.
func FuzzHandOverRecords(f *testing.F) {
	var x export
	x.add(recListener, []int{3, 4}, (&listenerRec{name: "web"}).append)
	x.add(recListener, []int{5}, (&listenerRec{name: "dns"}).append)
	sr := streamRec{relaying: true, route: "web", front: "web", src: netip.MustParseAddrPort("192.0.2.1:5"),
		target: Addr{Network: "tcp", Address: "127.0.0.1:80"}, up: dirRec{buf: []byte("abc"), hdr: 1},
		down: dirRec{hasPipe: true, inPipe: 7}}
	x.add(recStream, []int{6, 7, 8, 9}, sr.append)
	x.add(recStream, []int{10}, (&streamRec{front: "web", up: dirRec{buf: []byte("\x16\x03")}}).append)
	ses := sessionRec{route: "dns", client: netip.MustParseAddrPort("192.0.2.1:53"), local: netip.MustParseAddr("127.0.0.1"),
		target: Addr{Network: "udp", Address: "127.0.0.1:53"}, quic: true, version: 1, clientID: []byte("c1"), ids: [][]byte{[]byte("s1")}}
	x.add(recSession, []int{11}, ses.append)
	f.Add(x.frames[0].payload, uint8(9))
	f.Add([]byte{recListener, 0, 1, 0, 0, 0, 1, 1}, uint8(1))
	f.Add([]byte{recListener, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint8(0))
	f.Fuzz(func(t *testing.T, p []byte, nfds uint8) {
		rs, err := splitRecords(p, int(nfds))
		if err != nil {
			return
		}
		next := 0
		for _, r := range rs {
			if r.fd0 != next || r.nfd < 0 {
				t.Fatalf("record descriptors %d+%d, want from %d", r.fd0, r.nfd, next)
			}
			next += r.nfd
			if r.kind == recStream {
				if sr, err := decodeStream(r.body, r.nfd); err == nil {
					if sr.nfds() != r.nfd {
						t.Fatalf("stream record needs %d descriptors, carries %d", sr.nfds(), r.nfd)
					}
					if got := sr.append(nil); !bytes.Equal(got, r.body) {
						t.Fatalf("stream record %q re-encodes as %q", r.body, got)
					}
				}
			}
			if r.kind == recSession {
				if sr, err := decodeSession(r.body, r.nfd); err == nil {
					if got := sr.append(nil); !bytes.Equal(got, r.body) {
						t.Fatalf("session record %q re-encodes as %q", r.body, got)
					}
				}
			}
			if r.kind == recListener {
				if lr, err := decodeListener(r.body); err == nil {
					var b []byte
					if got := lr.append(b); !bytes.Equal(got, r.body) {
						t.Fatalf("listener record %q re-encodes as %q", r.body, got)
					}
				}
			}
		}
		if next != int(nfds) {
			t.Fatalf("records use %d descriptors of %d", next, nfds)
		}
	})
}

// FuzzHandOverFrameHeader: a frame header from a peer is refused with an
// error, or its counts are within the bounds a receiver allocates for.
func FuzzHandOverFrameHeader(f *testing.F) {
	f.Add(appendFrameHeader(nil, frParts, 100, 3))
	f.Add(appendFrameHeader(nil, frAbort, 5, 0))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseFrameHeader(b)
		if err != nil {
			return
		}
		if h.n > maxFramePayload || h.nfds > maxFrameFDs || h.n < 0 {
			t.Fatalf("header %+v over the bounds", h)
		}
	})
}

// TestHandOverVersion: a frame of another protocol version is refused,
// naming both versions.
func TestHandOverVersion(t *testing.T) {
	b := appendFrameHeader(nil, frParts, 0, 0)
	b[4], b[5] = 0, handOverVersion+1
	_, err := parseFrameHeader(b)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("version 2")) {
		t.Fatalf("parseFrameHeader: %v", err)
	}
}

// TestStreamRecordRoundTrip: a stream record decodes to what was
// encoded, and one whose descriptors or directions do not add up is
// refused.
func TestStreamRecordRoundTrip(t *testing.T) {
	sr := streamRec{relaying: true, route: "web", front: "web", src: netip.MustParseAddrPort("[2001:db8::1]:5"),
		dst: netip.MustParseAddrPort("192.0.2.9:443"), dstKnown: true, perClient: true, age: 7, upN: 1 << 40, downN: 3,
		target: Addr{Network: "unix", Address: "/run/b.sock"}, endFirst: 2, idle: 9, idleFor: 4, tHup: true,
		up: dirRec{buf: []byte("abc"), hdr: 1, full: 2, eof: true}, down: dirRec{hasPipe: true, inPipe: 7, spliced: true, shut: true, rerr: 104}}
	b := sr.append(nil)
	got, err := decodeStream(b, sr.nfds())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.append(nil), b) || got.src != sr.src || got.target != sr.target || got.down.inPipe != 7 {
		t.Fatalf("decoded %+v, want %+v", got, sr)
	}
	if _, err := decodeStream(b, sr.nfds()-1); err == nil {
		t.Error("a record short of a descriptor decoded")
	}
	sr.down.buf = []byte("x") // bytes in its buffer and its pipe
	if _, err := decodeStream(sr.append(nil), sr.nfds()); err == nil {
		t.Error("a direction with bytes in both buffer and pipe decoded")
	}
}

// TestSessionRecordRoundTrip: a UDP session record decodes to what was
// encoded.
func TestSessionRecordRoundTrip(t *testing.T) {
	r := sessionRec{route: "q", ln: 2, client: netip.MustParseAddrPort("[2001:db8::1]:443"), local: netip.MustParseAddr("::1"),
		ifidx: 3, proxy: []byte("hdr"), target: Addr{Network: "udp", Address: "127.0.0.1:4433"}, idleFor: 5,
		quic: true, version: 1, clientID: []byte("client01"), ids: [][]byte{[]byte("serverAA"), []byte("original")}, idLen: 8, lastUsed: 42}
	b := r.append(nil)
	got, err := decodeSession(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.append(nil), b) || got.client != r.client || got.local != r.local || len(got.ids) != 2 {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if _, err := decodeSession(b, 2); err == nil {
		t.Error("a session with two descriptors decoded")
	}
}
