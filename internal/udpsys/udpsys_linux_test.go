package udpsys

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSockaddrRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		family int
		in     string
		want   string
		len    uint32
	}{
		{unix.AF_INET, "127.0.0.1:53", "127.0.0.1:53", unix.SizeofSockaddrInet4},
		{unix.AF_INET, "[::ffff:10.0.0.1]:9", "10.0.0.1:9", unix.SizeofSockaddrInet4},
		{unix.AF_INET, "[::1]:9", "", 0},
		{unix.AF_INET6, "[::1]:65535", "[::1]:65535", unix.SizeofSockaddrInet6},
		{unix.AF_INET6, "10.1.2.3:443", "10.1.2.3:443", unix.SizeofSockaddrInet6}, // mapped out, unmapped back
		{unix.AF_INET6, "[fe80::1%7]:1", "[fe80::1%7]:1", unix.SizeofSockaddrInet6},
	} {
		var sa Sockaddr
		n := PutSockaddr(&sa, tc.family, netip.MustParseAddrPort(tc.in))
		if n != tc.len {
			t.Fatalf("%s: length %d, want %d", tc.in, n, tc.len)
		}
		if n == 0 {
			continue
		}
		if got := ParseSockaddr(&sa); got.String() != tc.want {
			t.Fatalf("%s: parsed %v, want %s", tc.in, got, tc.want)
		}
	}
	if n := PutSockaddr(new(Sockaddr), unix.AF_INET6, netip.AddrPort{}); n != 0 {
		t.Fatal("invalid address accepted")
	}
	if got := ParseSockaddr(new(Sockaddr)); got.IsValid() {
		t.Fatalf("unknown family parsed as %v", got)
	}
}

func TestSockaddrAllocs(t *testing.T) {
	var sa Sockaddr
	ap := netip.MustParseAddrPort("[2001:db8::1]:443")
	if a := testing.AllocsPerRun(100, func() {
		PutSockaddr(&sa, unix.AF_INET6, ap)
		_ = ParseSockaddr(&sa)
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

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
