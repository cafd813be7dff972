package quichello

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/zeroio/zeroio/internal/quictest"
	"github.com/zeroio/zeroio/internal/tlshello"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInitialKeys checks the derived keys against RFC 9001, A.1 and
// RFC 9369, A.1 (client Initial, DCID 0x8394c8f03e515708).
func TestInitialKeys(t *testing.T) {
	dcid := unhex(t, "8394c8f03e515708")
	for _, c := range []struct {
		version uint32
		key, iv string
	}{
		{Version1, "1f369613dd76d5467730efcbe3b1a22d", "fa044b2f42a3fd3b46fb255c"},
		{Version2, "8b1a0bc121284290a29e0971b5cd045d", "91f73e2351d8fa91660e909f"},
	} {
		k, err := initialKeys(c.version, dcid, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(k.iv[:]); got != c.iv {
			t.Errorf("version %#x: iv %s, want %s", c.version, got, c.iv)
		}
		// The AEAD hides its key; seal a known block with it instead
		// and compare with a GCM made from the expected key.
		want, err := gcmWith(unhex(t, c.key))
		if err != nil {
			t.Fatal(err)
		}
		nonce := k.iv[:]
		if a, b := k.aead.Seal(nil, nonce, []byte("x"), nil), want.Seal(nil, nonce, []byte("x"), nil); !bytes.Equal(a, b) {
			t.Errorf("version %#x: key differs from the RFC's", c.version)
		}
	}
}

// clientHello returns a real ClientHello as crypto/tls's QUIC client sends
// it in its Initial CRYPTO stream.
func clientHello(t testing.TB, name string, alpn ...string) []byte {
	t.Helper()
	hello, err := quictest.ClientHello(name, alpn...)
	if err != nil {
		t.Fatal(err)
	}
	return hello
}

// crypto appends a CRYPTO frame.
func crypto(b []byte, off int, data []byte) []byte { return AppendCrypto(b, off, data) }

// seal builds a protected client Initial packet carrying payload, padded
// with PADDING frames so that the packet takes at least padTo bytes.
func seal(t testing.TB, version uint32, dcid []byte, pn uint32, payload []byte, padTo int) []byte {
	t.Helper()
	pkt, err := SealInitial(version, dcid, []byte{1, 2, 3, 4}, pn, payload, padTo)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

var testDCID = []byte{0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08}

// split returns datagrams carrying hello in CRYPTO frames of at most
// chunk bytes, one packet each, with an ACK and a PING thrown in.
func split(t testing.TB, version uint32, hello []byte, chunk int) [][]byte {
	var out [][]byte
	for off, pn := 0, 0; off < len(hello); off, pn = off+chunk, pn+1 {
		end := min(off+chunk, len(hello))
		var payload []byte
		if pn == 1 {
			payload = append(payload, frameAck, 0, 0, 0, 0, framePing)
		}
		payload = crypto(payload, off, hello[off:end])
		out = append(out, seal(t, version, testDCID, uint32(pn), payload, 1200))
	}
	return out
}

func TestHelloAcrossDatagrams(t *testing.T) {
	hello := clientHello(t, "A.Example.", "h3", "hq-interop")
	for _, version := range []uint32{Version1, Version2} {
		for _, chunk := range []int{len(hello), 700, 300} {
			dgs := split(t, version, hello, chunk)
			orders := map[string][]int{"in order": nil, "reversed": nil, "last first": nil}
			for i := range dgs {
				orders["in order"] = append(orders["in order"], i)
				orders["reversed"] = append(orders["reversed"], len(dgs)-1-i)
			}
			orders["last first"] = append([]int{len(dgs) - 1}, orders["in order"][:len(dgs)-1]...)
			for name, order := range orders {
				var h Hello
				var info tlshello.Info
				for i, d := range order {
					err := h.Add(dgs[d], &info)
					if i < len(order)-1 && err != ErrNeedMore {
						t.Fatalf("v%#x chunk %d %s: datagram %d: %v, want ErrNeedMore", version, chunk, name, i, err)
					}
					if i == len(order)-1 && err != nil {
						t.Fatalf("v%#x chunk %d %s: last datagram: %v", version, chunk, name, err)
					}
				}
				if got := string(info.ServerName()); got != "a.example" {
					t.Errorf("v%#x chunk %d %s: server name %q", version, chunk, name, got)
				}
				if info.NumALPN() != 2 || string(info.ALPN(0)) != "h3" {
					t.Errorf("v%#x chunk %d %s: ALPN %d", version, chunk, name, info.NumALPN())
				}
				if h.Version() != version || !bytes.Equal(h.ConnID(), testDCID) {
					t.Errorf("version %#x conn ID %x", h.Version(), h.ConnID())
				}
			}
		}
	}
}

// TestHelloCoalesced puts two Initial packets and a trailing packet of
// another type in one datagram.
func TestHelloCoalesced(t *testing.T) {
	hello := clientHello(t, "b.example")
	half := len(hello) / 2
	one := seal(t, Version1, testDCID, 0, crypto(nil, 0, hello[:half]), 0)
	two := seal(t, Version1, testDCID, 1, crypto(nil, half, hello[half:]), 0)
	hs := append([]byte{0xe0}, one[1:40]...) // a Handshake-typed tail, not opened
	dg := append(append(append([]byte{}, one...), two...), hs...)
	var h Hello
	var info tlshello.Info
	if err := h.Add(dg, &info); err != nil {
		t.Fatal(err)
	}
	if string(info.ServerName()) != "b.example" {
		t.Fatalf("server name %q", info.ServerName())
	}
}

func TestHelloRefuses(t *testing.T) {
	hello := clientHello(t, "c.example")
	good := split(t, Version1, hello, 600)
	corrupt := bytes.Clone(good[0])
	corrupt[len(corrupt)-1] ^= 1
	unknown := bytes.Clone(good[0])
	binary.BigEndian.PutUint32(unknown[1:], 0xff00001d)
	shortID := seal(t, Version1, testDCID[:4], 0, crypto(nil, 0, hello), 1200)
	for _, c := range []struct {
		name string
		dg   []byte
		want error
	}{
		{"empty", nil, ErrNotQUIC},
		{"short header", []byte{0x40, 1, 2, 3}, ErrNotQUIC},
		{"truncated", good[0][:6], ErrMalformed},
		{"unknown version", unknown, ErrVersion},
		{"version negotiation", []byte{0x80, 0, 0, 0, 0, 0, 0}, ErrVersion},
		{"corrupt", corrupt, ErrDecrypt},
		{"short connection ID", shortID, ErrMalformed},
		{"not a hello", seal(t, Version1, testDCID, 0, crypto(nil, 0, []byte{2, 0, 0, 1, 0}), 1200), ErrNotTLSHello},
		{"unknown frame", seal(t, Version1, testDCID, 0, []byte{0x08, 0, 0}, 1200), ErrMalformed},
		{"past the bound", seal(t, Version1, testDCID, 0, crypto(nil, 20000, []byte{1}), 1200), ErrTooLarge},
	} {
		var h Hello
		var info tlshello.Info
		if err := h.Add(c.dg, &info); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	// A corrupt datagram does not spoil the real ones.
	var h Hello
	var info tlshello.Info
	if err := h.Add(corrupt, &info); err != ErrDecrypt {
		t.Fatalf("corrupt: %v", err)
	}
	var err error
	for _, d := range good {
		err = h.Add(d, &info)
	}
	if err != nil || string(info.ServerName()) != "c.example" {
		t.Fatalf("after a corrupt datagram: %v, name %q", err, info.ServerName())
	}

	// Too many packets without a whole hello.
	h = Hello{MaxPackets: 2}
	for i := range 3 {
		err = h.Add(seal(t, Version1, testDCID, uint32(i), []byte{framePing}, 1200), &info)
	}
	if err != ErrTooMany {
		t.Fatalf("three PINGs at MaxPackets 2: %v", err)
	}

	// Pieces too scattered to hold.
	h = Hello{}
	var scattered []byte
	for i := range maxRanges + 1 {
		scattered = crypto(scattered, 10+20*i, []byte{1})
	}
	if err = h.Add(seal(t, Version1, testDCID, 0, scattered, 1200), &info); err != ErrTooLarge {
		t.Fatalf("scattered pieces: %v", err)
	}
}

func TestTake(t *testing.T) {
	var h Hello
	for _, r := range [][2]int{{10, 20}, {30, 40}, {0, 5}, {5, 10}, {20, 30}} {
		if !h.take(r[0], make([]byte, r[1]-r[0])) {
			t.Fatalf("take %v refused", r)
		}
	}
	if h.nRanges != 1 || h.ranges[0] != [2]int{0, 40} {
		t.Fatalf("ranges %v (%d)", h.ranges[:h.nRanges], h.nRanges)
	}
}

func TestDecodePN(t *testing.T) {
	// RFC 9000, A.3's example.
	if got := decodePN(0xa82f30ea, 0x9b32, 16); got != 0xa82f9b32 {
		t.Fatalf("decodePN = %#x", got)
	}
	if got := decodePN(-1, 0, 8); got != 0 {
		t.Fatalf("first packet = %d", got)
	}
}

func TestShortConnID(t *testing.T) {
	id, ok := ShortConnID([]byte{0x41, 1, 2, 3, 4, 5}, 4)
	if !ok || !bytes.Equal(id, []byte{1, 2, 3, 4}) {
		t.Fatalf("%x %v", id, ok)
	}
	if _, ok := ShortConnID([]byte{0xc1, 1}, 1); ok {
		t.Fatal("long header read as short")
	}
	if _, ok := ShortConnID([]byte{0x41, 1}, 4); ok {
		t.Fatal("truncated packet read")
	}
}

func FuzzAdd(f *testing.F) {
	hello := clientHello(f, "f.example", "h3")
	for _, d := range split(f, Version1, hello, 500) {
		f.Add(d)
	}
	for _, d := range split(f, Version2, hello, 2000) {
		f.Add(d)
	}
	f.Add([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x40, 0x20})
	f.Fuzz(func(t *testing.T, dg []byte) {
		var h Hello
		var info tlshello.Info
		orig := bytes.Clone(dg)
		for range 2 {
			switch err := h.Add(dg, &info); err {
			case nil, ErrNeedMore, ErrNotQUIC, ErrVersion, ErrMalformed, ErrNotInitial, ErrDecrypt, ErrNotTLSHello, ErrTooLarge, ErrTooMany:
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
		if !bytes.Equal(dg, orig) {
			t.Fatal("Add wrote to the datagram")
		}
		ParseLong(dg)
		ShortConnID(dg, 8)
	})
}

func gcmWith(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
