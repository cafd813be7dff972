package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Addr is a relay endpoint: a network and an address in that network.
type Addr struct {
	// Network is "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6" or "unix";
	// for a target, also "srv+tcp" or "srv+udp": every record of a DNS
	// SRV name (see [Target]).
	Network string
	// Address is host:port (IPv6 hosts in brackets) for tcp and udp, a
	// file system path, or "@name" for the Linux abstract namespace, for
	// unix, and the SRV name (_service._proto.domain) for srv+tcp and
	// srv+udp.
	Address string
}

// String returns the address in the URL form [ParseAddr] accepts.
func (a Addr) String() string {
	if a.Network == "" {
		return ""
	}
	if a.Network == "unix" && !strings.HasPrefix(a.Address, "/") {
		return "unix://" + a.Address
	}
	if host, port, err := net.SplitHostPort(a.Address); err == nil && a.Network != "unix" && strings.Contains(host, ":") {
		if z := strings.IndexByte(host, '%'); z >= 0 { // an IPv6 zone, URL-escaped
			return a.Network + "://" + net.JoinHostPort(host[:z]+"%25"+host[z+1:], port)
		}
	}
	return a.Network + "://" + a.Address
}

// Stream reports whether a is a byte-stream address (TCP or Unix).
func (a Addr) Stream() bool { return a.Network != "" && !a.Datagram() }

// Datagram reports whether a is a UDP address.
func (a Addr) Datagram() bool { return strings.HasPrefix(a.Network, "udp") || a.Network == srvUDP }

// The schemes of SRV targets.
const (
	srvTCP = "srv+tcp"
	srvUDP = "srv+udp"
)

// isSRV reports whether a names a DNS SRV name rather than an endpoint.
func (a Addr) isSRV() bool { return a.Network == srvTCP || a.Network == srvUDP }

// ParseAddr parses tcp://host:port, udp://host:port (also tcp4, tcp6,
// udp4, udp6), unix:///absolute/path, unix://relative/path and
// unix://@abstract, and the SRV targets srv+tcp://_service._tcp.domain
// and srv+udp://_service._udp.domain (no port: the records give it).
// IPv6 hosts go in brackets: tcp://[::1]:8080, with a
// zone as tcp://[fe80::1%eth0]:80 or tcp://[fe80::1%25eth0]:80. The port
// is numeric. The host is an IP address or a DNS name (letters, digits,
// '-', '_' and '.'); a missing host is an error whose message says what
// to write instead (127.0.0.1 for this machine, 0.0.0.0 to listen on
// every network).
func ParseAddr(s string) (Addr, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Addr{}, fmt.Errorf("address %q has no scheme: write tcp://%s, udp://%s or unix:///path", s, s, s)
	}
	switch scheme {
	case "unix":
		if rest == "" || rest == "@" {
			return Addr{}, fmt.Errorf("address %q has no socket path: write unix:///path/to/socket", s)
		}
		if strings.ContainsRune(rest, 0) {
			return Addr{}, fmt.Errorf("address %q: socket path contains a NUL byte", s)
		}
		return Addr{Network: "unix", Address: rest}, nil
	case srvTCP, srvUDP:
		name := strings.TrimSuffix(rest, ".")
		if name == "" || strings.Contains(name, ":") || !hostOK(name) {
			return Addr{}, fmt.Errorf("address %q: want a DNS SRV name, as %s://_service._%s.example.com (no port: the records give it)", s, scheme, scheme[4:])
		}
		return Addr{Network: scheme, Address: name}, nil
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return Addr{}, fmt.Errorf("address %q: unknown scheme %q (want tcp, tcp4, tcp6, udp, udp4, udp6, unix, srv+tcp or srv+udp)", s, scheme)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return Addr{}, fmt.Errorf("address %q: %v (IPv6 hosts go in brackets: %s://[::1]:8080)", s, err, scheme)
	}
	if host == "" {
		return Addr{}, fmt.Errorf("address %q has no host: write %s://127.0.0.1:%s for this machine only, or, to listen on every network, %s://0.0.0.0:%s", s, scheme, port, scheme, port)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil || (port[0] == '0' && len(port) > 1) {
		return Addr{}, fmt.Errorf("address %q: port %q is not a number from 0 to 65535", s, port)
	}
	if !hostOK(host) {
		// User info (tcp://user@host:80), paths and the like: a
		// resolver would look the whole text up as a name and fail
		// only when the route starts or dials.
		return Addr{}, fmt.Errorf("address %q: bad host %q: want an IP address or a DNS name", s, host)
	}
	if z := strings.IndexByte(host, '%'); z >= 0 && strings.Contains(host, ":") && strings.HasPrefix(host[z:], "%25") {
		// An IPv6 zone URL-escaped, as RFC 6874 writes it in a URI
		// ([fe80::1%25eth0]) and String does; [fe80::1%eth0] is taken
		// too.
		host = host[:z] + "%" + host[z+3:]
	}
	return Addr{Network: scheme, Address: net.JoinHostPort(host, port)}, nil
}

// hostOK reports whether host, as net.SplitHostPort gives it, is an IP
// address (an IPv6 one with a zone, URL-escaped or not) or a DNS name.
func hostOK(host string) bool {
	if strings.Contains(host, ":") {
		_, err := netip.ParseAddr(strings.Replace(host, "%25", "%", 1))
		return err == nil
	}
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// bindKey names the socket address a listens on, for finding routes that
// would bind one address under two spellings (tcp and tcp4, ::1 and
// 0::1, a path and its cleaned form): protocol, IP and port, or the
// socket path. A host name is kept as written: its addresses are the
// resolver's. It returns "" for port 0, a new port on each bind.
func (a Addr) bindKey() string {
	if a.Network == "unix" {
		if strings.HasPrefix(a.Address, "@") {
			return "unix " + a.Address
		}
		return "unix " + filepath.Clean(a.Address)
	}
	if a.port() == 0 {
		return ""
	}
	proto := strings.TrimRight(a.Network, "46")
	ap, err := netip.ParseAddrPort(a.Address)
	if err != nil {
		return proto + " " + a.Address
	}
	return proto + " " + netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}

// port returns a's numeric port, 0 for unix.
func (a Addr) port() int {
	_, p, err := net.SplitHostPort(a.Address)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// checkPath reports a Unix socket path (or abstract name) too long for a
// socket address, which bind(2) and connect(2) refuse with EINVAL: a
// path fills sun_path with its terminating NUL (108 bytes on Linux, 104
// on the BSDs and darwin), a Linux abstract name fills it without one
// (unix(7)). Other addresses pass.
func (a Addr) checkPath() error {
	if a.Network != "unix" {
		return nil
	}
	most := len(syscall.RawSockaddrUnix{}.Path) - 1
	if strings.HasPrefix(a.Address, "@") && runtime.GOOS == "linux" {
		most++
	}
	if n := len(a.Address); n > most {
		return fmt.Errorf("unix socket path %s is %d bytes long: at most %d fit a socket address on %s", a.Address, n, most, runtime.GOOS)
	}
	return nil
}
