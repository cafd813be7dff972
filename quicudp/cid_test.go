package quicudp

import (
	"bytes"
	"testing"
)

// TestCIDGeneratorIDsDecode: every ID the generator issues is of its
// length and decodes to its server ID, and IDs differ from each other.
func TestCIDGeneratorIDsDecode(t *testing.T) {
	for _, cfg := range []LBConfig{
		{ConfigID: 0, ServerID: []byte{1}, NonceLen: 4},
		{ConfigID: 2, ServerID: []byte{0xde, 0xad, 0xbe, 0xef}, NonceLen: 8},
		{ConfigID: 6, ServerID: bytes.Repeat([]byte{9}, 11), NonceLen: 8},
	} {
		g, err := NewCIDGenerator(cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		seen := map[string]bool{}
		for range 1000 {
			id, err := g.GenerateConnectionID()
			if err != nil {
				t.Fatal(err)
			}
			b := id.Bytes()
			if len(b) != g.ConnectionIDLen() || len(b) != 1+len(cfg.ServerID)+cfg.NonceLen {
				t.Fatalf("%+v: ID % x of %d octets, ConnectionIDLen %d", cfg, b, len(b), g.ConnectionIDLen())
			}
			sid, err := ServerID(b, cfg.ConfigID, len(cfg.ServerID), cfg.NonceLen)
			if err != nil || !bytes.Equal(sid, cfg.ServerID) {
				t.Fatalf("%+v: ServerID(% x) = % x, %v", cfg, b, sid, err)
			}
			seen[string(b)] = true
		}
		// Four random octets repeat among 1,000 IDs with odds of about
		// one in ten thousand; eight never do here.
		if cfg.NonceLen >= 8 && len(seen) != 1000 {
			t.Errorf("%+v: %d distinct IDs of 1000", cfg, len(seen))
		}
	}
}

// TestCIDGeneratorKeepsItsServerID: the generator copies the server ID,
// so changing the caller's slice later changes nothing.
func TestCIDGeneratorKeepsItsServerID(t *testing.T) {
	sid := []byte{1, 2}
	g, err := NewCIDGenerator(LBConfig{ServerID: sid, NonceLen: 6})
	if err != nil {
		t.Fatal(err)
	}
	sid[0] = 9
	id, _ := g.GenerateConnectionID()
	if got, err := ServerID(id.Bytes(), 0, 2, 6); err != nil || !bytes.Equal(got, []byte{1, 2}) {
		t.Errorf("ServerID = % x, %v; want 01 02", got, err)
	}
}

func TestNewCIDGeneratorRejects(t *testing.T) {
	for name, cfg := range map[string]LBConfig{
		"no server ID":        {NonceLen: 8},
		"no nonce":            {ServerID: []byte{1}},
		"unroutable rotation": {ConfigID: 7, ServerID: []byte{1}, NonceLen: 8},
		"longer than 20":      {ServerID: make([]byte, 12), NonceLen: 8},
	} {
		if _, err := NewCIDGenerator(cfg); err == nil {
			t.Errorf("%s: NewCIDGenerator(%+v) succeeded", name, cfg)
		}
	}
}
