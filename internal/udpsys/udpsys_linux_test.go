package udpsys

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestControlRoundTrip(t *testing.T) {
	var b []byte
	b = AppendUDPSegment(b, 1400)
	b = AppendPktinfo(b, netip.MustParseAddr("192.0.2.7"), 3)
	b = AppendTOS(b, 2, true)
	h, data, rest, err := unix.ParseOneSocketControlMessage(b)
	if err != nil || h.Level != unix.SOL_UDP || h.Type != unix.UDP_SEGMENT || len(data) != 2 {
		t.Fatalf("UDP_SEGMENT: %+v %v", h, err)
	}
	c := ParseControl(rest)
	if c.IfIndex != 3 { // Dst is the header address, unset here
		t.Fatalf("pktinfo: %+v", c)
	}
	if !c.HasTOS || c.TOS != 2 {
		t.Fatalf("TOS: %+v", c)
	}
	b6 := AppendPktinfo(nil, netip.MustParseAddr("2001:db8::9"), 4)
	b6 = AppendTOS(b6, 3, false)
	c = ParseControl(b6)
	if c.Dst != netip.MustParseAddr("2001:db8::9") || c.IfIndex != 4 || c.TOS != 3 {
		t.Fatalf("IPv6: %+v", c)
	}
}

// FuzzParseControl: bytes from the kernel (or anywhere) never panic.
func FuzzParseControl(f *testing.F) {
	f.Add(AppendTOS(AppendPktinfo(nil, netip.MustParseAddr("::1"), 1), 1, false))
	f.Add(AppendUDPSegment(nil, 1))
	f.Add([]byte{255, 255, 255, 255, 0, 0, 0, 0, 17, 0, 0, 0, 104, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { _ = ParseControl(b) })
}
