package relay

import (
	"bytes"
	"testing"
)

// FuzzHandOverRecords: whatever a peer sends as a frame's payload and
// descriptor count, decoding returns records or an error, never panics,
// and hands out each descriptor to exactly one record.
func FuzzHandOverRecords(f *testing.F) {
	var x export
	x.add(recListener, []int{3, 4}, (&listenerRec{name: "web"}).append)
	x.add(recListener, []int{5}, (&listenerRec{name: "dns"}).append)
	f.Add(x.frames[0].payload, uint8(3))
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
