package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// ErrInvalid is wrapped by every error that reports a malformed header.
var ErrInvalid = errors.New("invalid PROXY protocol header")

// errShort is returned by parse when b holds only a prefix of a header;
// need is then the total length to read before calling again.
var errShort = errors.New("proxyproto: short header")

// Command is the v2 command; v1 headers are always [Proxy].
type Command uint8

const (
	// Local: the connection was made by the proxy itself (a health check);
	// the receiver uses the real connection endpoints.
	Local Command = 0
	// Proxy: the connection is relayed on behalf of Source.
	Proxy Command = 1
)

// Transport is the v2 transport protocol.
type Transport uint8

const (
	Unspec   Transport = 0
	Stream   Transport = 1
	Datagram Transport = 2
)

// Header is one decoded PROXY header.
type Header struct {
	Version   int // 1 or 2
	Command   Command
	Transport Transport
	// Source and Destination are the original client and the address it
	// connected to. They are invalid (zero) for Local, UNKNOWN, AF_UNSPEC
	// and AF_UNIX headers; the receiver then uses the connection's own
	// addresses.
	Source, Destination netip.AddrPort
	// TLVs holds the raw, structurally validated v2 type-length-value
	// records following the addresses (nil for v1).
	TLVs []byte
}

const (
	v1Max     = 107 // the longest v1 line, CRLF included (spec section 2.1)
	v2HdrLen  = 16
	v1Prefix  = "PROXY "
	sigPrefix = 5 // enough bytes to tell v1 from v2
)

var v2Sig = [12]byte{'\r', '\n', '\r', '\n', 0, '\r', '\n', 'Q', 'U', 'I', 'T', '\n'}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Parse decodes the header at the start of b, the bytes read from a
// stream so far, and returns it with its length in bytes; what follows
// the header in b is the stream's data. If b holds only the beginning of
// a valid header, the error wraps io.ErrUnexpectedEOF: read more and
// call again. An event loop that reads into its own buffer uses this
// where a blocking reader uses [ReadHeader].
func Parse(b []byte) (Header, int, error) {
	h, n, _, err := parse(b)
	if err == errShort {
		err = errNeedMore
	}
	return h, n, err
}

var errNeedMore = fmt.Errorf("proxyproto: %w", io.ErrUnexpectedEOF)

// parse decodes b; on errShort, need is the number of bytes (>len(b)) that
// must be available before the header can be decided.
func parse(b []byte) (h Header, n, need int, err error) {
	if len(b) < sigPrefix {
		if !prefixOK(b) {
			return h, 0, 0, invalid("no PROXY signature")
		}
		return h, 0, sigPrefix, errShort
	}
	if string(b[:sigPrefix]) == v1Prefix[:sigPrefix] {
		return parseV1(b)
	}
	if [sigPrefix]byte(b[:sigPrefix]) == [sigPrefix]byte(v2Sig[:sigPrefix]) {
		return parseV2(b)
	}
	return h, 0, 0, invalid("no PROXY signature")
}

func prefixOK(b []byte) bool {
	return string(b) == v1Prefix[:len(b)] || string(b) == string(v2Sig[:len(b)])
}

func parseV1(b []byte) (h Header, n, need int, err error) {
	end := -1
	for i := 0; i < len(b) && i+1 < v1Max; i++ {
		if b[i] == '\r' {
			if i+1 == len(b) {
				break
			}
			if b[i+1] != '\n' {
				return h, 0, 0, invalid("v1: CR not followed by LF")
			}
			end = i
			break
		}
		if b[i] == '\n' || b[i] == 0 {
			return h, 0, 0, invalid("v1: bad character in line")
		}
	}
	if end < 0 {
		if len(b) >= v1Max {
			return h, 0, 0, invalid("v1: line longer than %d bytes", v1Max)
		}
		// Read one more byte: the line's length is unknown until CRLF.
		return h, 0, len(b) + 1, errShort
	}
	line := b[:end]
	n = end + 2
	h.Version, h.Command = 1, Proxy
	if len(line) < len(v1Prefix) || string(line[:len(v1Prefix)]) != v1Prefix {
		return h, 0, 0, invalid("v1: missing \"PROXY \"")
	}
	f := fields(line[len(v1Prefix):])
	if len(f) == 0 {
		return h, 0, 0, invalid("v1: missing protocol")
	}
	switch string(f[0]) {
	case "UNKNOWN":
		// The rest of the line is ignored (spec 2.1).
		return h, n, 0, nil
	case "TCP4", "TCP6":
	default:
		return h, 0, 0, invalid("v1: unknown protocol %q", f[0])
	}
	if len(f) != 5 {
		return h, 0, 0, invalid("v1: want 5 fields, have %d", len(f))
	}
	six := f[0][3] == '6'
	src, err1 := netip.ParseAddr(string(f[1]))
	dst, err2 := netip.ParseAddr(string(f[2]))
	if err1 != nil || err2 != nil || src.Zone() != "" || dst.Zone() != "" {
		return h, 0, 0, invalid("v1: bad address")
	}
	if six != src.Is6() || six != dst.Is6() {
		return h, 0, 0, invalid("v1: address family does not match %s", f[0])
	}
	sp, ok1 := port(f[3])
	dp, ok2 := port(f[4])
	if !ok1 || !ok2 {
		return h, 0, 0, invalid("v1: bad port")
	}
	h.Transport = Stream
	h.Source = netip.AddrPortFrom(src, sp)
	h.Destination = netip.AddrPortFrom(dst, dp)
	return h, n, 0, nil
}

// fields splits on single spaces; an empty field (two spaces, a leading or
// trailing space) is kept so that the caller rejects it.
func fields(b []byte) [][]byte {
	var f [][]byte
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ' ' {
			f = append(f, b[start:i])
			start = i + 1
		}
	}
	return f
}

// port parses a decimal port without sign or leading zeros.
func port(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(string(b), 10, 16)
	return uint16(v), err == nil
}

func parseV2(b []byte) (h Header, n, need int, err error) {
	if len(b) < v2HdrLen {
		if k := min(len(b), len(v2Sig)); string(b[:k]) != string(v2Sig[:k]) {
			return h, 0, 0, invalid("v2: bad signature")
		}
		return h, 0, v2HdrLen, errShort
	}
	if [12]byte(b[:12]) != v2Sig {
		return h, 0, 0, invalid("v2: bad signature")
	}
	if b[12]>>4 != 2 {
		return h, 0, 0, invalid("v2: version %d", b[12]>>4)
	}
	h.Version = 2
	switch cmd := Command(b[12] & 0xf); cmd {
	case Local, Proxy:
		h.Command = cmd
	default:
		return h, 0, 0, invalid("v2: unknown command %d", cmd)
	}
	fam, tr := b[13]>>4, Transport(b[13]&0xf)
	if tr > Datagram {
		return h, 0, 0, invalid("v2: unknown transport %d", tr)
	}
	h.Transport = tr
	length := int(binary.BigEndian.Uint16(b[14:16]))
	n = v2HdrLen + length
	if len(b) < n {
		return h, 0, n, errShort
	}
	body := b[v2HdrLen:n]
	var alen int
	switch fam {
	case 0: // AF_UNSPEC
	case 1: // AF_INET
		alen = 12
	case 2: // AF_INET6
		alen = 36
	case 3: // AF_UNIX
		alen = 216
	default:
		return h, 0, 0, invalid("v2: unknown address family %d", fam)
	}
	if len(body) < alen {
		return h, 0, 0, invalid("v2: address block of %d bytes, family needs %d", len(body), alen)
	}
	if h.Command == Proxy {
		switch fam {
		case 1:
			h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
			h.Destination = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
		case 2:
			h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
			h.Destination = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
		}
	}
	tlv := body[alen:]
	for rest := tlv; len(rest) > 0; {
		if len(rest) < 3 {
			return h, 0, 0, invalid("v2: truncated TLV")
		}
		l := 3 + int(binary.BigEndian.Uint16(rest[1:3]))
		if l > len(rest) {
			return h, 0, 0, invalid("v2: TLV overruns header")
		}
		rest = rest[l:]
	}
	if len(tlv) > 0 {
		h.TLVs = append([]byte(nil), tlv...)
	}
	return h, n, 0, nil
}

// ReadHeader reads one header from r, consuming exactly its bytes: what
// follows stays in r (a socket) for the caller. Callers bound the time it
// may take with a read deadline. A stream that ends inside the header
// yields an error wrapping io.ErrUnexpectedEOF.
func ReadHeader(r io.Reader) (Header, error) {
	var small [232]byte // v1 lines and v2 headers up to AF_UNIX fit
	buf := small[:0]
	need := sigPrefix
	for {
		if need > cap(buf) {
			nb := make([]byte, len(buf), need)
			copy(nb, buf)
			buf = nb
		}
		m, err := io.ReadFull(r, buf[len(buf):need])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Header{}, fmt.Errorf("proxyproto: reading header: %w", err)
		}
		h, _, nd, err := parse(buf)
		if err != errShort {
			return h, err
		}
		need = nd
	}
}

// AppendV1 appends a v1 header for a stream from src to dst: TCP4 when
// both are IPv4 (or IPv4-mapped IPv6), else TCP6, an IPv4 address then
// written IPv4-mapped. If either address is invalid, it appends
// "PROXY UNKNOWN\r\n".
func AppendV1(b []byte, src, dst netip.AddrPort) []byte {
	src, dst = sameFamily(src, dst)
	if !src.IsValid() || !dst.IsValid() {
		return append(b, "PROXY UNKNOWN\r\n"...)
	}
	b = append(b, v1Prefix...)
	if src.Addr().Is4() {
		b = append(b, "TCP4 "...)
	} else {
		b = append(b, "TCP6 "...)
	}
	b = src.Addr().WithZone("").AppendTo(b)
	b = append(b, ' ')
	b = dst.Addr().WithZone("").AppendTo(b)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(src.Port()), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(dst.Port()), 10)
	return append(b, '\r', '\n')
}

// AppendV2 appends a v2 PROXY-command header for a connection of the given
// transport from src to dst, with no TLVs: AF_INET when both are IPv4 (or
// IPv4-mapped IPv6), else AF_INET6, an IPv4 address then IPv4-mapped.
// Invalid addresses are sent as AF_UNSPEC.
func AppendV2(b []byte, tr Transport, src, dst netip.AddrPort) []byte {
	src, dst = sameFamily(src, dst)
	b = append(b, v2Sig[:]...)
	b = append(b, 0x20|byte(Proxy))
	switch {
	case !src.IsValid() || !dst.IsValid():
		b = append(b, 0x00, 0, 0)
	case src.Addr().Is4():
		b = append(b, 0x10|byte(tr), 0, 12)
		s, d := src.Addr().As4(), dst.Addr().As4()
		b = append(append(b, s[:]...), d[:]...)
		b = binary.BigEndian.AppendUint16(b, src.Port())
		b = binary.BigEndian.AppendUint16(b, dst.Port())
	default:
		b = append(b, 0x20|byte(tr), 0, 36)
		s, d := src.Addr().As16(), dst.Addr().As16()
		b = append(append(b, s[:]...), d[:]...)
		b = binary.BigEndian.AppendUint16(b, src.Port())
		b = binary.BigEndian.AppendUint16(b, dst.Port())
	}
	return b
}

// AppendV2Local appends a v2 LOCAL-command header, for a connection the
// proxy makes itself, such as a health check: the receiver keeps the
// connection's own addresses (spec section 2.2).
func AppendV2Local(b []byte) []byte {
	b = append(b, v2Sig[:]...)
	return append(b, 0x20|byte(Local), 0x00, 0, 0)
}

// sameFamily gives src and dst one family, as a header holds them: IPv4
// when both are IPv4 or IPv4-mapped IPv6 (a dual-stack listener's view of
// an IPv4 client), else IPv6, mapping an IPv4 address into it, so that a
// client is never lost for its family (an IPv4-mapped client of a native
// IPv6 address, as a v1 TCP6 header may give them). Invalid addresses are
// returned as they are.
func sameFamily(src, dst netip.AddrPort) (netip.AddrPort, netip.AddrPort) {
	if !src.IsValid() || !dst.IsValid() {
		return src, dst
	}
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if s.Is4() != d.Is4() {
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	return netip.AddrPortFrom(s, src.Port()), netip.AddrPortFrom(d, dst.Port())
}
