package quiclb

import (
	"bytes"
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"smallest", Config{0, 1, 4}, true},
		{"longest ID", Config{6, 1, 18}, true},
		{"longest server ID", Config{2, 15, 4}, true},
		{"unroutable rotation", Config{Unroutable, 2, 6}, false},
		{"rotation beyond three bits", Config{9, 2, 6}, false},
		{"no server ID", Config{0, 0, 8}, false},
		{"server ID too long", Config{0, 16, 4}, false},
		{"nonce too short", Config{0, 4, 3}, false},
		{"nonce too long", Config{0, 1, 19}, false},
		{"over 20 octets", Config{0, 8, 12}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate(%+v) = %v, want ok %v", tc.c, err, tc.ok)
			}
		})
	}
}

// TestEncodeLayout checks one ID octet by octet against the draft's
// layout: config rotation 1 and length 7 make the first octet 001 00110.
func TestEncodeLayout(t *testing.T) {
	c := Config{ConfigID: 1, ServerIDLen: 2, NonceLen: 4}
	cid, err := c.Encode(make([]byte, MaxCIDLen), []byte{0xab, 0xcd}, []byte{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x26, 0xab, 0xcd, 1, 2, 3, 4}
	if !bytes.Equal(cid, want) {
		t.Fatalf("Encode = % x, want % x", cid, want)
	}
	if ConfigRotation(cid[0]) != 1 {
		t.Errorf("ConfigRotation(%#x) = %d, want 1", cid[0], ConfigRotation(cid[0]))
	}
}

func TestServerIDRoundTrip(t *testing.T) {
	for _, c := range []Config{{0, 1, 4}, {3, 4, 8}, {6, 15, 4}, {5, 1, 18}} {
		sid := bytes.Repeat([]byte{0x5a}, c.ServerIDLen)
		nonce := bytes.Repeat([]byte{0xff}, c.NonceLen)
		cid, err := c.Encode(make([]byte, c.CIDLen()), sid, nonce)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		// The ID alone, and the ID followed by the rest of a packet.
		for _, b := range [][]byte{cid, append(append([]byte(nil), cid...), "payload"...)} {
			got, err := c.ServerID(b)
			if err != nil || !bytes.Equal(got, sid) {
				t.Errorf("%+v: ServerID(% x) = % x, %v; want % x", c, b, got, err, sid)
			}
		}
	}
}

func TestServerIDRejects(t *testing.T) {
	c := Config{ConfigID: 2, ServerIDLen: 3, NonceLen: 6}
	cid, err := c.Encode(make([]byte, MaxCIDLen), []byte{1, 2, 3}, make([]byte, 6))
	if err != nil {
		t.Fatal(err)
	}
	other := Config{ConfigID: 3, ServerIDLen: 3, NonceLen: 6}
	longer := Config{ConfigID: 2, ServerIDLen: 3, NonceLen: 7}
	unroutable := append([]byte{Unroutable<<5 | byte(c.CIDLen()-1)}, cid[1:]...)
	for _, tc := range []struct {
		name string
		c    Config
		b    []byte
	}{
		{"empty", c, nil},
		{"truncated", c, cid[:len(cid)-1]},
		{"other rotation", other, cid},
		{"other length", longer, append(cid, 0)},
		{"unroutable", c, unroutable},
		{"invalid config", Config{}, cid},
	} {
		if sid, err := tc.c.ServerID(tc.b); !errors.Is(err, ErrNotRoutable) {
			t.Errorf("%s: ServerID = % x, %v; want ErrNotRoutable", tc.name, sid, err)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	c := Config{ConfigID: 0, ServerIDLen: 2, NonceLen: 4}
	for _, tc := range []struct {
		name            string
		c               Config
		dst, sid, nonce []byte
	}{
		{"invalid config", Config{ConfigID: Unroutable, ServerIDLen: 2, NonceLen: 4}, make([]byte, 7), []byte{1, 2}, make([]byte, 4)},
		{"short server ID", c, make([]byte, 7), []byte{1}, make([]byte, 4)},
		{"long nonce", c, make([]byte, 7), []byte{1, 2}, make([]byte, 5)},
		{"short destination", c, make([]byte, 6), []byte{1, 2}, make([]byte, 4)},
	} {
		if cid, err := tc.c.Encode(tc.dst, tc.sid, tc.nonce); err == nil {
			t.Errorf("%s: Encode = % x, want an error", tc.name, cid)
		}
	}
}

// FuzzServerID: decoding arbitrary bytes never panics, and what decodes
// is exactly what Encode makes of the decoded server ID and the nonce
// that follows it. The lengths are taken modulo a little past their
// limits, so that most configurations are valid and some are not.
func FuzzServerID(f *testing.F) {
	f.Add(uint8(1), uint8(2), uint8(4), []byte{0x26, 0xab, 0xcd, 1, 2, 3, 4, 9})
	f.Add(uint8(0), uint8(1), uint8(4), []byte{0x05, 1, 2, 3, 4, 5})
	f.Add(uint8(6), uint8(15), uint8(4), make([]byte, 20))
	f.Add(uint8(7), uint8(0), uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, cr, sidLen, nonceLen uint8, b []byte) {
		c := Config{ConfigID: cr % 8, ServerIDLen: int(sidLen % 17), NonceLen: int(nonceLen % 20)}
		if len(b) > 0 && c.Validate() == nil && sidLen&0x80 != 0 {
			b = append([]byte{c.firstOctet()}, b[1:]...) // a routable first octet
		}
		sid, err := c.ServerID(b)
		if err != nil {
			if !errors.Is(err, ErrNotRoutable) {
				t.Fatalf("ServerID error %v, want ErrNotRoutable", err)
			}
			return
		}
		if c.Validate() != nil {
			t.Fatalf("an invalid %+v decoded % x", c, b)
		}
		cid, err := c.Encode(make([]byte, MaxCIDLen), sid, b[1+c.ServerIDLen:c.CIDLen()])
		if err != nil || !bytes.Equal(cid, b[:c.CIDLen()]) {
			t.Fatalf("re-encoding % x gave % x, %v", b[:c.CIDLen()], cid, err)
		}
	})
}
