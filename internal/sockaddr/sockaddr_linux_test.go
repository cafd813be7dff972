package sockaddr

import (
	"net/netip"
	"testing"
	"unsafe"

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
		var sa Inet
		n := PutInet(&sa, tc.family, netip.MustParseAddrPort(tc.in))
		if n != tc.len {
			t.Fatalf("%s: length %d, want %d", tc.in, n, tc.len)
		}
		if n == 0 {
			continue
		}
		if got := ParseInet(&sa); got.String() != tc.want {
			t.Fatalf("%s: parsed %v, want %s", tc.in, got, tc.want)
		}
	}
	if n := PutInet(new(Inet), unix.AF_INET6, netip.AddrPort{}); n != 0 {
		t.Fatal("invalid address accepted")
	}
	if got := ParseInet(new(Inet)); got.IsValid() {
		t.Fatalf("unknown family parsed as %v", got)
	}
}

func TestSockaddrAllocs(t *testing.T) {
	var sa Inet
	ap := netip.MustParseAddrPort("[2001:db8::1]:443")
	if a := testing.AllocsPerRun(100, func() {
		PutInet(&sa, unix.AF_INET6, ap)
		_ = ParseInet(&sa)
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// TestAddr builds connect(2) addresses: IPv4 (mapped or not) as AF_INET,
// IPv6 as AF_INET6, Unix paths with their NUL, abstract names without,
// and refuses paths sun_path cannot hold.
func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		in     string
		family int
		len    uint32
	}{
		{"127.0.0.1:80", unix.AF_INET, unix.SizeofSockaddrInet4},
		{"[::ffff:127.0.0.1]:80", unix.AF_INET, unix.SizeofSockaddrInet4},
		{"[::1]:80", unix.AF_INET6, unix.SizeofSockaddrInet6},
	} {
		ap := netip.MustParseAddrPort(tc.in)
		a := FromAddrPort(ap)
		if a.Family != tc.family || a.Len != tc.len {
			t.Errorf("%s: family %d length %d, want %d %d", tc.in, a.Family, a.Len, tc.family, tc.len)
		}
		if got := a.AddrPort(); got != netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) {
			t.Errorf("%s: back as %v", tc.in, got)
		}
	}
	a, ok := FromUnix("/run/x.sock")
	p := (*unix.RawSockaddrUnix)(unsafe.Pointer(&a.Raw))
	if !ok || a.Family != unix.AF_UNIX || a.Len != 2+12 || p.Path[11] != 0 || p.Path[0] != '/' {
		t.Errorf("path: %v %+v", ok, a)
	}
	if a.AddrPort().IsValid() {
		t.Error("a Unix address has an IP")
	}
	a, ok = FromUnix("@abstract")
	p = (*unix.RawSockaddrUnix)(unsafe.Pointer(&a.Raw))
	if !ok || a.Len != 2+9 || p.Path[0] != 0 || p.Path[1] != 'a' {
		t.Errorf("abstract: %v %+v", ok, a)
	}
	long := make([]byte, len(p.Path))
	for i := range long {
		long[i] = 'x'
	}
	if _, ok := FromUnix(string(long)); ok {
		t.Error("a path too long for sun_path accepted")
	}
	if _, ok := FromUnix(""); ok {
		t.Error("an empty path accepted")
	}
}
