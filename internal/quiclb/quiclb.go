// Package quiclb encodes and decodes QUIC connection IDs that carry a
// server ID in plaintext, as the QUIC-LB draft's unencrypted mode lays
// them out (draft-ietf-quic-load-balancers, "Unencrypted Mode"), so that a
// load balancer can route any packet of a connection, whatever address it
// comes from, by the server ID in its destination connection ID.
//
// A connection ID issued under a [Config] is
//
//	first octet | server ID (ServerIDLen octets) | nonce (NonceLen octets)
//
// where the first octet holds the config rotation bits (its top three)
// and the connection ID's length minus one (its low five: the draft's
// length self-encoding). Config rotation [Unroutable] marks an ID that
// carries no server ID.
//
// The package is pure: no sockets, no QUIC implementation. The quicudp
// module wraps [Config.Encode] as a quic-go ConnectionIDGenerator; a relay
// calls [Config.ServerID] on packets.
package quiclb

import (
	"errors"
	"fmt"
)

// Limits of the draft's unencrypted mode.
const (
	// MaxCIDLen is QUIC v1's longest connection ID (RFC 9000 section 17.2).
	MaxCIDLen = 20
	// MaxServerIDLen is the longest server ID.
	MaxServerIDLen = 15
	// MinNonceLen and MaxNonceLen bound the nonce: at least four octets,
	// so that a server can issue many IDs without repeating one.
	MinNonceLen = 4
	MaxNonceLen = 18
	// Unroutable is the config rotation value of connection IDs that carry
	// no server ID; no Config may use it.
	Unroutable = 0b111
)

// Config is how a connection ID carries its server ID. A load balancer
// and the servers behind it share ConfigID, ServerIDLen and NonceLen;
// each server has its own server ID of ServerIDLen octets.
type Config struct {
	// ConfigID is the config rotation value, 0 to 6: the top three bits of
	// every connection ID issued under this Config, which lets a load
	// balancer tell configurations apart while it moves between them.
	ConfigID uint8
	// ServerIDLen is the length of server IDs, 1 to MaxServerIDLen.
	ServerIDLen int
	// NonceLen is the length of the nonce that follows the server ID,
	// MinNonceLen to MaxNonceLen. ServerIDLen + NonceLen is at most 19.
	NonceLen int
}

// ErrNotRoutable is returned by [Config.ServerID] for bytes that do not
// begin with a connection ID issued under the Config.
var ErrNotRoutable = errors.New("quiclb: not a connection ID of this configuration")

// Validate reports whether c is a configuration the draft allows.
func (c Config) Validate() error {
	switch {
	case c.ConfigID >= Unroutable:
		return fmt.Errorf("quiclb: config rotation %d: want 0 to %d", c.ConfigID, Unroutable-1)
	case c.ServerIDLen < 1 || c.ServerIDLen > MaxServerIDLen:
		return fmt.Errorf("quiclb: server ID length %d: want 1 to %d", c.ServerIDLen, MaxServerIDLen)
	case c.NonceLen < MinNonceLen || c.NonceLen > MaxNonceLen:
		return fmt.Errorf("quiclb: nonce length %d: want %d to %d", c.NonceLen, MinNonceLen, MaxNonceLen)
	case c.CIDLen() > MaxCIDLen:
		return fmt.Errorf("quiclb: server ID length %d and nonce length %d make a %d-octet connection ID: the most is %d",
			c.ServerIDLen, c.NonceLen, c.CIDLen(), MaxCIDLen)
	}
	return nil
}

// CIDLen is the length of the connection IDs c issues.
func (c Config) CIDLen() int { return 1 + c.ServerIDLen + c.NonceLen }

// firstOctet is the first octet of c's connection IDs.
func (c Config) firstOctet() byte { return c.ConfigID<<5 | byte(c.CIDLen()-1) }

// Encode writes the connection ID for serverID and nonce into dst[:CIDLen]
// and returns that slice. The caller chooses the nonce: random, or a
// counter that never repeats for one server ID. It fails if c is not
// valid, serverID is not ServerIDLen octets, nonce is not NonceLen
// octets, or dst is shorter than CIDLen.
func (c Config) Encode(dst, serverID, nonce []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch {
	case len(serverID) != c.ServerIDLen:
		return nil, fmt.Errorf("quiclb: server ID of %d octets, configured length %d", len(serverID), c.ServerIDLen)
	case len(nonce) != c.NonceLen:
		return nil, fmt.Errorf("quiclb: nonce of %d octets, configured length %d", len(nonce), c.NonceLen)
	case len(dst) < c.CIDLen():
		return nil, fmt.Errorf("quiclb: %d octets for a %d-octet connection ID", len(dst), c.CIDLen())
	}
	dst = dst[:c.CIDLen()]
	dst[0] = c.firstOctet()
	copy(dst[1:], serverID)
	copy(dst[1+c.ServerIDLen:], nonce)
	return dst, nil
}

// ServerID returns the server ID of the connection ID at the start of b
// (b may run on: a short-header packet's bytes after its first octet),
// as a subslice of b. It returns [ErrNotRoutable] if b is shorter than
// c's connection IDs, or its first octet has other config rotation bits
// or another length than c's.
func (c Config) ServerID(b []byte) ([]byte, error) {
	if c.Validate() != nil || len(b) < c.CIDLen() || b[0] != c.firstOctet() {
		return nil, ErrNotRoutable
	}
	return b[1 : 1+c.ServerIDLen], nil
}

// ConfigRotation returns the config rotation bits of a connection ID's
// first octet: which Config issued it, or [Unroutable].
func ConfigRotation(first byte) uint8 { return first >> 5 }
