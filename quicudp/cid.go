package quicudp

import (
	"crypto/rand"

	"github.com/quic-go/quic-go"
	"github.com/zeroio/zeroio/internal/quiclb"
)

// LBConfig is the layout of the connection IDs a [CIDGenerator] issues,
// and the server ID they carry. A load balancer and the servers behind
// it agree on ConfigID, the length of the server IDs and NonceLen; each
// server has its own ServerID.
type LBConfig struct {
	// ConfigID is the config rotation value, 0 to 6: the top three bits of
	// every connection ID, which let a load balancer tell an old
	// configuration from a new one while it moves between them.
	ConfigID uint8
	// ServerID is this server's ID, 1 to 15 octets, compared as bytes.
	ServerID []byte
	// NonceLen is the length of the random nonce after the server ID, 4
	// to 18 octets, and at most 19 minus the server ID's length. The
	// nonce is what makes the IDs of one server differ: with 4 octets,
	// two of a few tens of thousands of IDs are likely to repeat; 8 or
	// more keeps repeats out of reach.
	NonceLen int
}

func (c LBConfig) layout() quiclb.Config {
	return quiclb.Config{ConfigID: c.ConfigID, ServerIDLen: len(c.ServerID), NonceLen: c.NonceLen}
}

// CIDGenerator is a quic.ConnectionIDGenerator (set it as a
// quic.Transport's ConnectionIDGenerator) whose connection IDs carry a
// server ID, in the QUIC-LB draft's unencrypted layout.
type CIDGenerator struct {
	layout   quiclb.Config
	serverID []byte
}

var _ quic.ConnectionIDGenerator = (*CIDGenerator)(nil)

// NewCIDGenerator returns a generator of connection IDs laid out as cfg
// says, or an error naming what cfg gets wrong.
func NewCIDGenerator(cfg LBConfig) (*CIDGenerator, error) {
	layout := cfg.layout()
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	return &CIDGenerator{layout: layout, serverID: append([]byte(nil), cfg.ServerID...)}, nil
}

// GenerateConnectionID returns a new connection ID: the first octet, the
// server ID and a random nonce.
func (g *CIDGenerator) GenerateConnectionID() (quic.ConnectionID, error) {
	var nonce, buf [quiclb.MaxCIDLen]byte
	rand.Read(nonce[:g.layout.NonceLen]) // never fails (crypto/rand, Go 1.24)
	cid, err := g.layout.Encode(buf[:], g.serverID, nonce[:g.layout.NonceLen])
	if err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(cid), nil
}

// ConnectionIDLen returns the length of the generator's connection IDs:
// one octet, the server ID and the nonce.
func (g *CIDGenerator) ConnectionIDLen() int { return g.layout.CIDLen() }

// ServerID returns the server ID carried by the connection ID at the
// start of b (b may run on, as a short-header packet does after its
// first octet), for connection IDs laid out with configID, server IDs of
// serverIDLen octets and nonces of nonceLen octets. It fails if b does
// not begin with such a connection ID. The returned slice is part of b.
func ServerID(b []byte, configID uint8, serverIDLen, nonceLen int) ([]byte, error) {
	return quiclb.Config{ConfigID: configID, ServerIDLen: serverIDLen, NonceLen: nonceLen}.ServerID(b)
}
