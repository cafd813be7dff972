package relay

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
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

// dnsAnswer builds the response to the query q (RFC 1035 section 4.1):
// its question, and an answer record for each address of the asked name
// of the asked type; NXDOMAIN for a name not in names.
func dnsAnswer(q []byte, names map[string][]netip.Addr) []byte {
	if len(q) < 12 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	name := strings.ToLower(strings.Join(labels, "."))
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
