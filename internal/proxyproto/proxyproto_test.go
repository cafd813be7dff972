package proxyproto

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"
)

var (
	src4 = netip.MustParseAddrPort("192.0.2.1:56324")
	dst4 = netip.MustParseAddrPort("198.51.100.7:443")
	src6 = netip.MustParseAddrPort("[2001:db8::1]:1000")
	dst6 = netip.MustParseAddrPort("[2001:db8::2]:80")
)

// read decodes the header at the start of b with ReadHeader, as the relay
// does, and returns it with the number of bytes it consumed.
func read(b []byte) (Header, int, error) {
	r := bytes.NewReader(b)
	h, err := ReadHeader(r)
	return h, len(b) - r.Len(), err
}

func TestRoundTrip(t *testing.T) {
	mapped := func(ap netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
	}
	for _, tc := range []struct {
		name     string
		src, dst netip.AddrPort
		// What the header carries: the family both share.
		wantSrc, wantDst netip.AddrPort
	}{
		{"ipv4", src4, dst4, src4, dst4},
		{"ipv6", src6, dst6, src6, dst6},
		{"mapped", mapped(src4), dst4, src4, dst4},
		{"both mapped", mapped(src4), mapped(dst4), src4, dst4},
		// A client of one family reaching an address of the other
		// (a v1 TCP6 header may give an IPv4-mapped source and a
		// native IPv6 destination): IPv6, the IPv4 side mapped.
		{"mapped to ipv6", mapped(src4), dst6, mapped(src4), dst6},
		{"ipv4 to ipv6", src4, dst6, mapped(src4), dst6},
		{"ipv6 to ipv4", src6, dst4, src6, mapped(dst4)},
		{"unknown", netip.AddrPort{}, dst4, netip.AddrPort{}, netip.AddrPort{}},
	} {
		for _, v := range []int{1, 2} {
			var b []byte
			if v == 1 {
				b = AppendV1(nil, tc.src, tc.dst)
			} else {
				b = AppendV2(nil, Stream, tc.src, tc.dst)
			}
			payload := "hello after header"
			r := strings.NewReader(string(b) + payload)
			h, err := ReadHeader(iotest.OneByteReader(r))
			if err != nil {
				t.Fatalf("%s v%d: %v (%q)", tc.name, v, err, b)
			}
			if h.Version != v {
				t.Errorf("%s: version %d, want %d", tc.name, h.Version, v)
			}
			if h.Source != tc.wantSrc || h.Destination != tc.wantDst {
				t.Errorf("%s v%d: %v to %v, want %v to %v (%q)", tc.name, v, h.Source, h.Destination, tc.wantSrc, tc.wantDst, b)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != payload {
				t.Errorf("%s v%d: ReadHeader consumed payload; rest %q", tc.name, v, rest)
			}
			h2, n, err := read(b)
			if err != nil || n != len(b) || h2.Source != h.Source || h2.Destination != h.Destination {
				t.Errorf("%s v%d: read whole = %+v, %d, %v", tc.name, v, h2, n, err)
			}
		}
	}
}

func TestV2Local(t *testing.T) {
	b := AppendV2Local(nil)
	h, n, err := Parse(append(b, "after"...))
	if err != nil || n != len(b) || h.Version != 2 || h.Command != Local || h.Source.IsValid() || h.Destination.IsValid() {
		t.Fatalf("%q: %+v, %d, %v; want a LOCAL header of %d bytes", b, h, n, err, len(b))
	}
}

func TestV1Exact(t *testing.T) {
	got := string(AppendV1(nil, src4, dst4))
	if want := "PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestParseRejects(t *testing.T) {
	v2 := AppendV2(nil, Stream, src4, dst4)
	mut := func(i int, c byte) string { b := bytes.Clone(v2); b[i] = c; return string(b) }
	for name, in := range map[string]string{
		"garbage":          "GET / HTTP/1.1\r\n",
		"v1 lowercase":     "proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
		"v1 bad proto":     "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
		"v1 family":        "PROXY TCP4 ::1 ::1 1 2\r\n",
		"v1 family6":       "PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n",
		"v1 port range":    "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
		"v1 port zero":     "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
		"v1 port sign":     "PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
		"v1 double space":  "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
		"v1 extra field":   "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
		"v1 bare LF":       "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
		"v1 zone":          "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",
		"v1 leading zero":  "PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
		"v1 too long":      "PROXY UNKNOWN " + strings.Repeat("x", 100) + "\r\n",
		"v2 version":       mut(12, 0x11),
		"v2 command":       mut(12, 0x22),
		"v2 family":        mut(13, 0x41),
		"v2 transport":     mut(13, 0x13),
		"v2 short address": mut(15, 4),
		"v2 signature":     mut(11, 'X'),
		"v2 bad tlv":       string(append(append(v2[:14:14], 0, 14), append(bytes.Clone(v2[16:]), 1, 0)...)),
	} {
		if _, err := ReadHeader(strings.NewReader(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ReadHeader(%q) = %v, want ErrInvalid", name, in, err)
		}
		if _, err := ReadHeader(iotest.OneByteReader(strings.NewReader(in))); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ReadHeader byte by byte = %v, want ErrInvalid", name, err)
		}
	}
}

func TestParseTLVAndLocal(t *testing.T) {
	b := AppendV2(nil, Stream, src6, dst6)
	b[15] += 7
	b = append(b, 0x04, 0, 4, 'a', 'b', 'c', 'd') // PP2_TYPE_NOOP
	h, n, err := read(b)
	if err != nil || n != len(b) || !bytes.Equal(h.TLVs, b[len(b)-7:]) {
		t.Fatalf("ReadHeader = %+v %d %v", h, n, err)
	}
	b[12] = 0x20 // LOCAL
	h, _, err = read(b)
	if err != nil || h.Command != Local || h.Source.IsValid() {
		t.Fatalf("LOCAL: %+v %v", h, err)
	}
}

func TestTruncated(t *testing.T) {
	for _, full := range [][]byte{AppendV1(nil, src6, dst6), AppendV2(nil, Stream, src6, dst6)} {
		for i := range full {
			_, err := ReadHeader(bytes.NewReader(full[:i]))
			want := io.ErrUnexpectedEOF
			if i == 0 {
				want = io.EOF // nothing at all: the client closed
			}
			if !errors.Is(err, want) {
				t.Fatalf("ReadHeader(%q) = %v, want %v", full[:i], err, want)
			}
		}
	}
}

func FuzzReadHeader(f *testing.F) {
	f.Add(AppendV1(nil, src4, dst4))
	f.Add(AppendV1(nil, src6, dst6))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(AppendV2(nil, Stream, src4, dst4))
	f.Add(AppendV2(nil, Datagram, src6, dst6))
	f.Add(AppendV2(nil, Stream, netip.AddrPort{}, dst6))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := read(b)
		// Parse, on the bytes read so far, decides the same.
		ph, pn, perr := Parse(b)
		if (err == nil) != (perr == nil) || err == nil && (pn != n || ph.Source != h.Source || ph.Destination != h.Destination) {
			t.Fatalf("Parse: %+v, %d, %v; ReadHeader: %+v, %d, %v", ph, pn, perr, h, n, err)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, io.ErrUnexpectedEOF) && !(len(b) == 0 && errors.Is(err, io.EOF)) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("n = %d for %d bytes", n, len(b))
		}
		// Read a byte at a time, as from a slow client, it decodes the
		// same header and leaves the rest unread.
		r := bytes.NewReader(b)
		h2, err := ReadHeader(iotest.OneByteReader(r))
		if err != nil || h2.Source != h.Source || h2.Destination != h.Destination || r.Len() != len(b)-n {
			t.Fatalf("byte by byte: %+v, %v, left %d; whole: %+v, %d", h2, err, r.Len(), h, n)
		}
		// A header we accept re-encodes to one we accept with the same addresses.
		if h.Command == Proxy && h.Source.IsValid() {
			var re []byte
			if h.Version == 1 {
				re = AppendV1(nil, h.Source, h.Destination)
			} else {
				re = AppendV2(nil, h.Transport, h.Source, h.Destination)
			}
			h3, _, err := read(re)
			src, dst := sameFamily(h.Source, h.Destination)
			if err != nil || h3.Source != src || h3.Destination != dst {
				t.Fatalf("re-encode %q: %+v %v", re, h3, err)
			}
		}
	})
}
