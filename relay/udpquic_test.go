package relay

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/quiclb"
)

// quicLong builds a QUIC version 1 long-header packet of type typ
// (0 Initial, 2 Handshake) with the connection IDs and payload given. It
// is not encrypted: following connection IDs reads only the header.
func quicLong(typ byte, dcid, scid, payload []byte) []byte {
	b := []byte{0xc0 | typ<<4}
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, byte(len(dcid)))
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	if typ == 0 {
		b = append(b, 0) // no token
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(payload))|0x4000)
	return append(b, payload...)
}

// quicShort builds a short-header packet to dcid.
func quicShort(dcid []byte, payload string) []byte {
	return append(append([]byte{0x40}, dcid...), payload...)
}

// quicTarget is a fake QUIC server: it answers a long-header packet with
// a Handshake packet from its own connection ID (id) to the client's, and
// a short-header packet addressed to id with "id:payload".
func quicTarget(t *testing.T, id []byte) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	serveUDP(t, c, func(in []byte) []byte {
		if in[0]&0x80 != 0 {
			dl := int(in[5])
			scid := in[7+dl : 7+dl+int(in[6+dl])] // the client's source ID
			return quicLong(2, scid, id, []byte("hello"))
		}
		if len(in) > len(id) && bytes.Equal(in[1:1+len(id)], id) {
			return append(append([]byte(nil), id...), append([]byte(":"), in[1+len(id):]...)...)
		}
		return []byte("unknown connection")
	})
	return c
}

// TestUDPFollowsQUICConnectionID: a QUIC client whose address changes
// (each new socket is a NAT rebinding) stays with the target that knows
// its connection, although the route balances new clients round-robin
// over two targets; its replies go to its new address.
func TestUDPFollowsQUICConnectionID(t *testing.T) {
	leakCheck(t)
	idA, idB := []byte("serverAA"), []byte("serverBB")
	a, b := quicTarget(t, idA), quicTarget(t, idB)
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", a.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)

	first := dialUDP(t, ra)
	clientID := []byte("client01")
	hs := exchange(t, first, quicLong(0, []byte("original"), clientID, make([]byte, 1200)))
	var server []byte
	switch {
	case bytes.Contains(hs, idA):
		server = idA
	case bytes.Contains(hs, idB):
		server = idB
	default:
		t.Fatalf("handshake reply %q", hs)
	}
	for i := range 8 {
		c := dialUDP(t, ra) // a new source port: the client was rebound
		msg := []byte{'m', byte('0' + i)}
		got := exchange(t, c, quicShort(server, string(msg)))
		if want := append(append([]byte(nil), server...), append([]byte(":"), msg...)...); !bytes.Equal(got, want) {
			t.Fatalf("after rebinding %d: reply %q, want %q", i, got, want)
		}
	}
	st := s.Stats().Routes[0]
	if st.SessionsTotal != 1 || st.SessionsMoved != 8 {
		t.Fatalf("sessions %d, moved %d; want 1 and 8", st.SessionsTotal, st.SessionsMoved)
	}

	// Traffic that is not QUIC keeps its sessions by address: a
	// datagram whose first bytes look like a short header to the
	// learned ID, from a client that never sent an Initial, is a new
	// session when it does not carry an ID a target chose.
	other := dialUDP(t, ra)
	if got := exchange(t, other, quicShort([]byte("nobody!!"), "x")); string(got) != "unknown connection" {
		t.Fatalf("unrelated client: %q", got)
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 2 || st.SessionsMoved != 8 {
		t.Fatalf("after an unrelated client: sessions %d, moved %d", st.SessionsTotal, st.SessionsMoved)
	}
}

// TestUDPLearnsOnlyQUICAnswers: a target whose replies are not addressed
// to the client's connection ID teaches the relay nothing, so a client
// that is not QUIC cannot be taken for one that moved.
func TestUDPLearnsOnlyQUICAnswers(t *testing.T) {
	leakCheck(t)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	id := []byte("serverCC")
	serveUDP(t, c, func(in []byte) []byte {
		if in[0]&0x80 != 0 {
			return quicLong(2, []byte("someone!"), id, []byte("hello")) // not to the client's ID
		}
		return []byte("plain")
	})
	s := startRelay(t, udpRoute0("127.0.0.1:0", c.LocalAddr(), nil))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	exchange(t, dialUDP(t, ra), quicLong(0, []byte("original"), []byte("client02"), make([]byte, 64)))
	exchange(t, dialUDP(t, ra), quicShort(id, "x"))
	if st := s.Stats().Routes[0]; st.SessionsTotal != 2 || st.SessionsMoved != 0 {
		t.Fatalf("sessions %d, moved %d; want 2 and 0", st.SessionsTotal, st.SessionsMoved)
	}
}

// exchange sends msg from c and returns the first reply, retrying a few
// times on a loaded machine.
func exchange(t *testing.T, c *net.UDPConn, msg []byte) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	for range 5 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil {
			return buf[:n]
		}
	}
	t.Fatalf("no reply to %q", msg[:min(len(msg), 16)])
	return nil
}

// TestUDPRoutesByQUICServerID: clients that the relay has never seen,
// sending to connection IDs that carry a target's server ID (a client
// that migrated to a new path with a new ID), reach that target, though
// the route balances round-robin.
func TestUDPRoutesByQUICServerID(t *testing.T) {
	leakCheck(t)
	lb := quiclb.Config{ConfigID: 1, ServerIDLen: 2, NonceLen: 5}
	cidOf := func(server string, nonce string) []byte {
		b, err := lb.Encode(make([]byte, lb.CIDLen()), []byte(server), []byte(nonce))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := quicTarget(t, cidOf("AA", "aaaaa")), quicTarget(t, cidOf("BB", "bbbbb"))
	ta, tb := Addr{"udp", a.LocalAddr().String()}, Addr{"udp", b.LocalAddr().String()}
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: ta, Weight: 1}, {Addr: tb, Weight: 1}},
		QUICLB:  &QUICLB{ConfigID: 1, ServerIDLen: 2, NonceLen: 5, Servers: []QUICServer{{ta, []byte("AA")}, {tb, []byte("BB")}}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	for i := range 6 {
		server := []string{"AA", "AA", "BB", "AA", "BB", "BB"}[i]
		id := cidOf(server, "aaaaa")
		if server == "BB" {
			id = cidOf(server, "bbbbb")
		}
		got := exchange(t, dialUDP(t, ra), quicShort(id, "hi"))
		if want := string(id) + ":hi"; string(got) != want {
			t.Fatalf("client %d to server %s: reply %q, want %q", i, server, got, want)
		}
	}
}

func TestQUICLBConfigChecked(t *testing.T) {
	ta, tb := Addr{"udp", "127.0.0.1:1"}, Addr{"udp", "127.0.0.1:2"}
	for _, c := range []struct {
		name string
		q    QUICLB
		want string
	}{
		{"bad layout", QUICLB{ServerIDLen: 0, NonceLen: 5}, "server ID length 0"},
		{"wrong length", QUICLB{ServerIDLen: 2, NonceLen: 5, Servers: []QUICServer{{ta, []byte("A")}}}, "has 1 octets"},
		{"not a target", QUICLB{ServerIDLen: 1, NonceLen: 5, Servers: []QUICServer{{Addr{"udp", "127.0.0.1:3"}, []byte("A")}}}, "not a target"},
		{"twice", QUICLB{ServerIDLen: 1, NonceLen: 5, Servers: []QUICServer{{ta, []byte("A")}, {tb, []byte("A")}}}, "given to both"},
	} {
		q := c.q
		_, err := New(Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Targets: []Target{{Addr: ta, Weight: 1}, {Addr: tb, Weight: 1}}, QUICLB: &q}}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	_, err := New(Config{Routes: []Route{{Name: "s", Listen: Addr{"tcp", "127.0.0.1:0"}, Target: ta, QUICLB: &QUICLB{ServerIDLen: 1, NonceLen: 5}}}})
	if err == nil || !strings.Contains(err.Error(), "quic_lb") {
		t.Errorf("quic_lb on a stream route: %v", err)
	}
}

// TestUDPQUICIDBeatsStaleSession: a QUIC client rebound to a port that a
// stale session of another connection still holds (a NAT reused it)
// reaches its own connection's target, not the stale session's.
func TestUDPQUICIDBeatsStaleSession(t *testing.T) {
	leakCheck(t)
	idA, idB := []byte("serverAA"), []byte("serverBB")
	a, b := quicTarget(t, idA), quicTarget(t, idB)
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", a.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	one, two := dialUDP(t, ra), dialUDP(t, ra)
	ids := map[*net.UDPConn][]byte{}
	for _, c := range []*net.UDPConn{one, two} {
		port := []byte(c.LocalAddr().String()[10:]) // distinct IDs for each connection
		hs := exchange(t, c, quicLong(0, append([]byte("original"), port...), append([]byte("client"), port...), make([]byte, 64)))
		switch {
		case bytes.Contains(hs, idA):
			ids[c] = idA
		case bytes.Contains(hs, idB):
			ids[c] = idB
		}
	}
	if ids[one] == nil || ids[two] == nil || bytes.Equal(ids[one], ids[two]) {
		t.Fatalf("round-robin gave the two connections targets %q and %q", ids[one], ids[two])
	}
	// Connection one's client now sends from two's address.
	got := exchange(t, two, quicShort(ids[one], "moved"))
	if want := string(ids[one]) + ":moved"; string(got) != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
	if st := s.Stats().Routes[0]; st.SessionsMoved != 1 {
		t.Fatalf("%d sessions moved, want 1", st.SessionsMoved)
	}
}

// TestUDPQUICNewConnectionAtOldAddress: a QUIC client's Initial packets,
// retransmitted to the ID it chose or sent to the one its target chose,
// stay in its session; an Initial of a new connection from the same
// address (a port the kernel gave a new client) is a new client, balanced
// round-robin to the other target, and the old session ends.
func TestUDPQUICNewConnectionAtOldAddress(t *testing.T) {
	leakCheck(t)
	idA, idB := []byte("serverAA"), []byte("serverBB")
	a, b := quicTarget(t, idA), quicTarget(t, idB)
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", a.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	target := func(hs []byte) string {
		switch {
		case bytes.Contains(hs, idA):
			return string(idA)
		case bytes.Contains(hs, idB):
			return string(idB)
		}
		t.Fatalf("reply %q names no target", hs)
		return ""
	}
	first := target(exchange(t, c, quicLong(0, []byte("original1"), []byte("client01"), make([]byte, 64))))
	if again := target(exchange(t, c, quicLong(0, []byte("original1"), []byte("client01"), make([]byte, 64)))); again != first {
		t.Fatalf("a retransmitted Initial reached %s, its connection %s", again, first)
	}
	if chosen := target(exchange(t, c, quicLong(0, []byte(first), []byte("client01"), make([]byte, 64)))); chosen != first {
		t.Fatalf("an Initial to the target's ID reached %s, its connection %s", chosen, first)
	}
	if st := s.Stats().Routes[0]; st.SessionsStale != 0 || st.SessionsTotal != 1 {
		t.Fatalf("one connection: %d stale sessions, %d opened", st.SessionsStale, st.SessionsTotal)
	}
	second := target(exchange(t, c, quicLong(0, []byte("original2"), []byte("client02"), make([]byte, 64))))
	if second == first {
		t.Fatalf("a new connection from the old address reached the old connection's target %s", first)
	}
	st := s.Stats().Routes[0]
	if st.SessionsStale != 1 || st.SessionsTotal != 2 {
		t.Fatalf("%d stale sessions, %d opened; want 1 and 2", st.SessionsStale, st.SessionsTotal)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Sessions == 1 })
}
