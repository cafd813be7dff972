package tlshello

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/zeroio/zeroio/internal/tlshello/hellotest"
)

// captureHello returns the records of the first flight a crypto/tls client
// with cfg sends: the ClientHello, framed by crypto/tls itself. The framing
// is read here from the record headers, independently of Parse.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c, cfg).Handshake() // fails when s closes
	}()
	var out []byte
	need := -1 // handshake bytes still to read, once known
	for need != 0 {
		var hdr [5]byte
		if _, err := io.ReadFull(s, hdr[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(s, body); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, hdr[:]...), body...)
		if need < 0 {
			need = 4 + (int(body[1])<<16 | int(body[2])<<8 | int(body[3]))
		}
		need -= len(body)
	}
	s.Close()
	c.Close()
	<-done
	return out
}

// reframe splits the handshake message carried by recs into records of at
// most size bytes each: a hello split across TLS records.
func reframe(recs []byte, size int) []byte {
	var msg []byte
	vers := recs[1:3]
	for len(recs) >= 5 {
		n := int(binary.BigEndian.Uint16(recs[3:]))
		msg = append(msg, recs[5:5+n]...)
		recs = recs[5+n:]
	}
	var out []byte
	for len(msg) > 0 {
		k := min(size, len(msg))
		out = append(out, 22, vers[0], vers[1], byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

type helloCase struct {
	name  string
	cfg   *tls.Config
	sni   string
	alpn  []string
	tls12 bool
}

func helloCases() []helloCase {
	return []helloCase{
		{name: "sni", cfg: &tls.Config{ServerName: "a.example.com"}, sni: "a.example.com"},
		{name: "sni-alpn", cfg: &tls.Config{ServerName: "B.Example.COM", NextProtos: []string{"h2", "http/1.1"}}, sni: "b.example.com", alpn: []string{"h2", "http/1.1"}},
		{name: "no-sni", cfg: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"acme-tls/1"}}, alpn: []string{"acme-tls/1"}},
		{name: "ip-no-sni", cfg: &tls.Config{ServerName: "127.0.0.1"}},
		{name: "tls12", cfg: &tls.Config{ServerName: "old.example", MaxVersion: tls.VersionTLS12}, sni: "old.example", tls12: true},
		{name: "long-name", cfg: &tls.Config{ServerName: "x123456789.y123456789.z123456789.w123456789.v123456789.example.org"}, sni: "x123456789.y123456789.z123456789.w123456789.v123456789.example.org"},
	}
}

func check(t *testing.T, h *Info, c helloCase) {
	t.Helper()
	if got := string(h.ServerName()); got != c.sni {
		t.Errorf("ServerName = %q, want %q", got, c.sni)
	}
	var alpn []string
	for i := range h.NumALPN() {
		alpn = append(alpn, string(h.ALPN(i)))
	}
	if len(alpn) != len(c.alpn) {
		t.Fatalf("ALPN = %q, want %q", alpn, c.alpn)
	}
	for i := range alpn {
		if alpn[i] != c.alpn[i] {
			t.Fatalf("ALPN = %q, want %q", alpn, c.alpn)
		}
	}
}

func TestParseRealHellos(t *testing.T) {
	for _, c := range helloCases() {
		t.Run(c.name, func(t *testing.T) {
			hello := captureHello(t, c.cfg)
			var h Info
			// Whole, with bytes after it, and split into records of
			// every awkward size: the answer is the same.
			for _, size := range []int{0, 1, 2, 3, 4, 5, 7, 64, 1000} {
				b := hello
				if size > 0 {
					b = reframe(hello, size)
				}
				want := len(b)
				b = append(b[:len(b):len(b)], 23, 3, 3, 0, 1, 'x')
				if err := Parse(b, &h); err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				if h.Len != want {
					t.Fatalf("size %d: Len = %d, want %d", size, h.Len, want)
				}
				check(t, &h, c)
				// Every shorter prefix is a valid start: need more.
				for i := range want {
					if err := Parse(b[:i], &h); err != ErrNeedMore {
						t.Fatalf("size %d: prefix %d/%d: %v, want ErrNeedMore", size, i, want, err)
					}
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "a.example.com", NextProtos: []string{"h2"}})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(hello)) }
	tests := []struct {
		name  string
		in    []byte
		limit int
		want  error
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, ErrNotTLS},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.6\r\n"), 0, ErrNotTLS},
		{"sslv2", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, 0, ErrNotTLS},
		{"record version", []byte{22, 2, 0, 0, 1}, 0, ErrNotTLS},
		{"empty record", []byte{22, 3, 1, 0, 0, 1}, 0, ErrMalformed},
		{"record too long", []byte{22, 3, 1, 0x40, 1}, 0, ErrMalformed},
		{"server hello", mut(func(b []byte) []byte { b[5] = 2; return b }), 0, ErrMalformed},
		{"alert after first record", append(reframe(hello, 10)[:15:15], 21, 3, 3, 0, 2, 2, 40), 0, ErrMalformed},
		{"hello longer than its extensions", mut(func(b []byte) []byte { b[7]++; return b }), 0, ErrMalformed},
		{"truncated", hello[:len(hello)-1], 0, ErrNeedMore},
		{"hello shorter than records", mut(func(b []byte) []byte { b[8]--; return b }), 0, ErrMalformed},
		{"too large for limit", hello, len(hello) - 1, ErrTooLarge},
		{"incomplete at limit", hello[:100], 100, ErrTooLarge},
		{"fits limit exactly", hello, len(hello), nil},
		{"declared huge", []byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, 0, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Info
			if err := ParseLimit(tc.in, tc.limit, &h); err != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestParseBadNames builds hellos whose server name is not a host name.
func TestParseBadNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		want error
		sni  string
	}{
		{"ok.example", nil, "ok.example"},
		{"Trailing.Dot.", nil, "trailing.dot"},
		{"under_score.example", nil, "under_score.example"},
		{".", ErrMalformed, ""},
		{"sp ace", ErrMalformed, ""},
		{"nul\x00", ErrMalformed, ""},
		{"caf\xc3\xa9", ErrMalformed, ""},
		{string(bytes.Repeat([]byte("a"), 256)), ErrMalformed, ""},
	} {
		var h Info
		err := Parse(hellotest.Build(tc.name, nil), &h)
		if err != tc.want {
			t.Errorf("%q: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if got := string(h.ServerName()); got != tc.sni {
			t.Errorf("%q: ServerName %q, want %q", tc.name, got, tc.sni)
		}
	}
}

func TestParseALPNBounds(t *testing.T) {
	var protos []string
	for i := range 40 {
		protos = append(protos, string(bytes.Repeat([]byte{'a' + byte(i%26)}, 20)))
	}
	var h Info
	if err := Parse(hellotest.Build("x.example", protos), &h); err != nil {
		t.Fatal(err)
	}
	if h.NumALPN() != MaxALPN {
		t.Fatalf("kept %d protocols, want %d", h.NumALPN(), MaxALPN)
	}
	if got := string(h.ALPN(1)); got != protos[1] {
		t.Fatalf("ALPN(1) = %q", got)
	}
}

func TestParseAllocs(t *testing.T) {
	hello := reframe(captureHello(t, &tls.Config{ServerName: "a.example.com", NextProtos: []string{"h2", "http/1.1"}}), 100)
	var h Info
	var err error
	n := testing.AllocsPerRun(100, func() {
		err = Parse(hello, &h)
		err = Parse(hello[:len(hello)/2], &h)
	})
	if n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
	if !errors.Is(err, ErrNeedMore) {
		t.Fatal(err)
	}
}

func BenchmarkParse(b *testing.B) {
	hello := captureHello(b, &tls.Config{ServerName: "a.example.com", NextProtos: []string{"h2", "http/1.1"}})
	b.SetBytes(int64(len(hello)))
	b.ReportAllocs()
	var h Info
	for b.Loop() {
		if err := Parse(hello, &h); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseHandshake reads the same hellos without their record layer, as
// QUIC carries them in CRYPTO frames.
func TestParseHandshake(t *testing.T) {
	for _, c := range helloCases() {
		framed := captureHello(t, c.cfg)
		var want Info
		if err := Parse(framed, &want); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		msg := framed[recordHeaderLen:want.Len]
		var h Info
		if err := ParseHandshake(msg, 0, &h); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.Len != len(msg) || string(h.ServerName()) != string(want.ServerName()) || h.NumALPN() != want.NumALPN() {
			t.Fatalf("%s: Len %d of %d, name %q", c.name, h.Len, len(msg), h.ServerName())
		}
		for _, p := range []int{0, 1, 4, len(msg) / 2, len(msg) - 1} {
			if err := ParseHandshake(msg[:p], 0, &h); err != ErrNeedMore {
				t.Fatalf("%s: prefix %d: %v", c.name, p, err)
			}
		}
		if err := ParseHandshake(msg, len(msg)-1, &h); err != ErrTooLarge {
			t.Fatalf("%s: limit below its length: %v", c.name, err)
		}
		if err := ParseHandshake(framed, 0, &h); err != ErrNotTLS {
			t.Fatalf("%s: a record read as a message: %v", c.name, err)
		}
	}
}
