package relay

import (
	"bytes"

	"github.com/zeroio/zeroio/internal/quichello"
	"github.com/zeroio/zeroio/internal/quiclb"
)

// QUICLB is how the targets of a UDP route put a server ID in the QUIC
// connection IDs they issue, in the unencrypted layout of the QUIC-LB
// draft (draft-ietf-quic-load-balancers): a first octet holding ConfigID
// and the ID's length, the server ID, then a nonce. A QUIC server
// generates such IDs with package quicudp's CIDGenerator.
//
// A session is found by its client's address, then by the connection IDs
// it has seen (see the relay reference); a client that migrates to a new
// path also moves to a connection ID the relay has never seen. With
// QUICLB, a datagram from an address without a session whose destination
// connection ID carries a server ID opens its session on the target with
// that ID, if it is up, instead of balancing: the connection lives on.
type QUICLB struct {
	// ConfigID is the config rotation value, 0 to 6.
	ConfigID uint8
	// ServerIDLen and NonceLen are the lengths of the server ID (1 to
	// 15) and of the nonce after it (4 to 18); together at most 19.
	ServerIDLen, NonceLen int
	// Servers gives the route's targets their server IDs. A target
	// without one is balanced to as usual.
	Servers []QUICServer
}

// QUICServer is the server ID of one of a route's targets.
type QUICServer struct {
	// Target is the target's address, as it stands in Route.Targets.
	Target Addr
	// ID is its server ID, ServerIDLen octets.
	ID []byte
}

func (q *QUICLB) layout() quiclb.Config {
	return quiclb.Config{ConfigID: q.ConfigID, ServerIDLen: q.ServerIDLen, NonceLen: q.NonceLen}
}

// validateQUICLB checks r.QUICLB against r's targets.
func (r *Route) validateQUICLB(bad func(string, ...any)) {
	q := r.QUICLB
	if q == nil {
		return
	}
	if q.ServerIDLen == 0 && q.NonceLen == 0 && len(q.Servers) > 0 {
		bad("quic_lb: server IDs are given, but not the layout of the connection IDs (server_id_len, nonce_len)")
		return
	}
	if err := q.layout().Validate(); err != nil {
		bad("quic_lb: %v", err)
		return
	}
	for i, sv := range q.Servers {
		if len(sv.ID) != q.ServerIDLen {
			bad("quic_lb: server ID %x of %s has %d octets: server_id_len is %d", sv.ID, sv.Target, len(sv.ID), q.ServerIDLen)
		}
		known, dynamic := false, false
		for _, t := range r.targetList() {
			known = known || t.Addr == sv.Target
			dynamic = dynamic || t.Addr == sv.Target && t.dynamic()
		}
		if dynamic {
			bad("quic_lb: server ID %x names %s, which DNS turns into several backends: give server IDs to targets of one address", sv.ID, sv.Target)
		} else if !known {
			bad("quic_lb: server ID %x names %s, which is not a target of the route", sv.ID, sv.Target)
		}
		for _, o := range q.Servers[:i] {
			if bytes.Equal(o.ID, sv.ID) {
				bad("quic_lb: server ID %x given to both %s and %s", sv.ID, o.Target, sv.Target)
			}
		}
	}
}

// targetList is r's targets, the lone Target as a list of one.
func (r *Route) targetList() []Target {
	if len(r.Targets) > 0 {
		return r.Targets
	}
	return []Target{{Addr: r.Target, Weight: 1}}
}

// serverFor returns the index in ts of the target whose server ID the
// QUIC datagram b is addressed to, and the connection ID that carries
// it; -1 if m carries none the route knows.
func serverFor(q *QUICLB, ts *targetSet, b []byte) (int, []byte) {
	if q == nil || len(b) == 0 {
		return -1, nil
	}
	var dcid []byte
	switch {
	case b[0]&0xc0 == 0x40: // a short header: the ID follows the first octet
		dcid = b[1:]
	case b[0]&0xc0 == 0xc0:
		// A long header other than the client's Initial (and 0-RTT),
		// which go to the ID the client chose.
		h, err := quichello.ParseLong(b)
		if err != nil || h.Type != quichello.TypeHandshake {
			return -1, nil
		}
		dcid = h.DstConnID
	default:
		return -1, nil
	}
	lo := q.layout()
	id, err := lo.ServerID(dcid)
	if err != nil {
		return -1, nil
	}
	for _, sv := range q.Servers {
		if !bytes.Equal(sv.ID, id) {
			continue
		}
		for i, bk := range ts.bs {
			if bk.addr == sv.Target {
				return i, dcid[:lo.CIDLen()]
			}
		}
	}
	return -1, nil
}
