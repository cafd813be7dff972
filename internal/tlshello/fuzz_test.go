package tlshello

import (
	"crypto/tls"
	"testing"

	"github.com/zeroio/zeroio/internal/tlshello/hellotest"
)

// FuzzParse feeds Parse anything, seeded with real crypto/tls hellos whole
// and split across records, and checks what must hold whatever the input.
func FuzzParse(f *testing.F) {
	for _, c := range helloCases() {
		hello := captureHello(f, c.cfg)
		f.Add(hello, 0)
		f.Add(reframe(hello, 3), 0)
		f.Add(reframe(hello, 200), len(hello))
	}
	f.Add(captureHello(f, &tls.Config{ServerName: "x.example"}), 64)
	f.Add(hellotest.Build("a.b", []string{"h2", "x"}), 0)
	f.Add([]byte("GET / HTTP/1.1\r\n"), 0)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		var h Info
		switch err := ParseHandshake(b, limit, &h); err {
		case nil:
			if h.Len < 4 || h.Len > len(b) {
				t.Fatalf("handshake Len %d of %d bytes", h.Len, len(b))
			}
		case ErrNeedMore, ErrNotTLS, ErrMalformed, ErrTooLarge:
		default:
			t.Fatalf("ParseHandshake: unexpected error %v", err)
		}
		err := ParseLimit(b, limit, &h)
		switch err {
		case nil, ErrNeedMore, ErrNotTLS, ErrMalformed, ErrTooLarge:
		default:
			t.Fatalf("unexpected error %v", err)
		}
		if limit <= 0 {
			limit = DefaultMaxLen
		}
		if err == ErrNeedMore && len(b) >= limit {
			t.Fatalf("need more with %d bytes at limit %d", len(b), limit)
		}
		if err != nil {
			return
		}
		if h.Len < 9 || h.Len > len(b) || h.Len > limit {
			t.Fatalf("Len %d of %d bytes, limit %d", h.Len, len(b), limit)
		}
		name := h.ServerName()
		if len(name) > MaxNameLen || (name != nil && len(name) == 0) {
			t.Fatalf("name %q", name)
		}
		for _, c := range name {
			if 'A' <= c && c <= 'Z' || c <= ' ' || c >= 0x7f {
				t.Fatalf("name %q not normalized", name)
			}
		}
		total := 0
		for i := range h.NumALPN() {
			p := h.ALPN(i)
			if len(p) == 0 {
				t.Fatal("empty ALPN protocol")
			}
			total += len(p)
		}
		if total > MaxALPNBytes || h.NumALPN() > MaxALPN {
			t.Fatalf("%d protocols, %d bytes", h.NumALPN(), total)
		}
		// The hello alone parses the same; any prefix needs more.
		var h2 Info
		if err := ParseLimit(b[:h.Len], limit, &h2); err != nil || h2 != h {
			t.Fatalf("hello alone: %v, %+v", err, h2)
		}
		for _, p := range []int{0, 1, 5, 6, h.Len / 2, h.Len - 1} {
			if p < h.Len {
				if err := ParseLimit(b[:p], limit, &h2); err != ErrNeedMore {
					t.Fatalf("prefix %d of %d: %v", p, h.Len, err)
				}
			}
		}
	})
}
