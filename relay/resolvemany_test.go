package relay

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// fakeDNS answers A and AAAA queries for names from a table over UDP on
// loopback, and streamResolver is pointed at it for the test: a name can
// then have several addresses, which /etc/hosts rarely gives.
func fakeDNS(t *testing.T, names map[string][]netip.Addr) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	serveUDP(t, pc, func(q []byte) []byte { return dnsAnswer(q, names) })
	old := streamResolver
	streamResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", pc.LocalAddr().String())
	}}
	t.Cleanup(func() { streamResolver = old })
}

// slowDNS is fakeDNS answering each name after its delay, each query
// on its own, so that a slow name does not hold up the others.
func slowDNS(t *testing.T, names map[string][]netip.Addr, delay map[string]time.Duration) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			name, _, _ := dnsQuestion(buf[:n])
			resp := dnsAnswer(buf[:n], names)
			time.AfterFunc(delay[name], func() { pc.WriteToUDPAddrPort(resp, from) })
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	old := streamResolver
	streamResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", pc.LocalAddr().String())
	}}
	t.Cleanup(func() { streamResolver = old })
}

// dnsQuestion returns the name a query q asks for, in lower case, and
// where its question ends; ok is false if q is too short to hold one.
func dnsQuestion(q []byte) (name string, end int, ok bool) {
	if len(q) < 12 {
		return "", 0, false
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return "", 0, false
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return "", 0, false
	}
	return strings.ToLower(strings.Join(labels, ".")), i + 5, true
}

// dnsAnswer builds the response to the query q (RFC 1035 section 4.1):
// its question, and an answer record for each address of the asked name
// of the asked type; NXDOMAIN for a name not in names.
func dnsAnswer(q []byte, names map[string][]netip.Addr) []byte {
	name, end, ok := dnsQuestion(q)
	if !ok {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end-4:])
	question := q[12:end]
	addrs, ok := names[name]
	resp := append([]byte{}, q[:2]...) // ID
	flags := uint16(0x8180)            // a response, recursion desired and available
	if !ok {
		flags |= 3 // NXDOMAIN
	}
	resp = binary.BigEndian.AppendUint16(resp, flags)
	var answers []byte
	count := 0
	for _, a := range addrs {
		rtype, rdata := uint16(1), a.AsSlice()
		if a.Is6() {
			rtype = 28
		}
		if rtype != qtype {
			continue
		}
		answers = append(answers, 0xc0, 12) // the question's name
		answers = binary.BigEndian.AppendUint16(answers, rtype)
		answers = binary.BigEndian.AppendUint16(answers, 1) // IN
		answers = binary.BigEndian.AppendUint32(answers, 60)
		answers = binary.BigEndian.AppendUint16(answers, uint16(len(rdata)))
		answers = append(answers, rdata...)
		count++
	}
	resp = binary.BigEndian.AppendUint16(resp, 1) // QDCOUNT
	resp = binary.BigEndian.AppendUint16(resp, uint16(count))
	resp = binary.BigEndian.AppendUint32(resp, 0) // NSCOUNT, ARCOUNT
	resp = append(resp, question...)
	return append(resp, answers...)
}

// TestTargetNameSeveralAddresses: a target named by a host name whose
// first address refuses is reached at its next address, as package net's
// dialer does, on every engine; the target is not marked down.
func TestTargetNameSeveralAddresses(t *testing.T) {
	forEachEngine(t, testTargetNameSeveralAddresses)
}

func testTargetNameSeveralAddresses(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp6", echo) // on [::1] only: 127.0.0.1 refuses
	_, port, _ := net.SplitHostPort(b.addr.Address)
	fakeDNS(t, map[string][]netip.Addr{
		"multi.zeroio.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
	})
	s := startRelay(t, route0("127.0.0.1:0", Addr{"tcp", net.JoinHostPort("multi.zeroio.test", port)}, nil))
	for i := range 3 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 1000, uint64(i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c.Close()
	}
	if st := s.Stats().Routes[0]; st.DialErrors != 0 || !st.Targets[0].Up {
		t.Errorf("%d clients failed; target %+v", st.DialErrors, st.Targets[0])
	}
}

// TestLateNameAnswerKeepsItsTarget: a client whose dial gave up on a
// target whose name did not resolve in time, and went on to another
// target whose name is being looked up, is not dialled to the first
// target's address when the first name's late answer comes: it waits
// for its own target, here until the dial timeout.
func TestLateNameAnswerKeepsItsTarget(t *testing.T) {
	forEachEngine(t, testLateNameAnswerKeepsItsTarget)
}

func testLateNameAnswerKeepsItsTarget(t *testing.T) {
	say := func(s string) func(net.Conn) { return func(c net.Conn) { io.WriteString(c, s) } }
	a := startBackend(t, "tcp4", say("a"))
	b := startBackend(t, "tcp4", say("b"))
	_, pa, _ := net.SplitHostPort(a.addr.Address)
	_, pb, _ := net.SplitHostPort(b.addr.Address)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	// The dial timeout gives a.zeroio.test's attempt 1 s and
	// b.zeroio.test's the second: a's answer comes in b's, b's never.
	slowDNS(t, map[string][]netip.Addr{"a.zeroio.test": lo, "b.zeroio.test": lo},
		map[string]time.Duration{"a.zeroio.test": 1400 * time.Millisecond, "b.zeroio.test": time.Minute})
	s := startRelay(t, targetsRoute(func(r *Route) { r.DialTimeout = 2 * time.Second },
		Addr{"tcp", net.JoinHostPort("a.zeroio.test", pa)}, Addr{"tcp", net.JoinHostPort("b.zeroio.test", pb)}))
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if len(got) != 0 || err != nil {
		t.Fatalf("client got %q, %v; want it closed with no target", got, err)
	}
	if st := s.Stats().Routes[0]; st.DialErrors != 1 || st.Targets[0].Connections+st.Targets[1].Connections != 0 {
		t.Errorf("want one failed dial and no connection: %+v", st)
	}
}
