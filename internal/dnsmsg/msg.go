package dnsmsg

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
)

// Record types and the class this package knows.
const (
	TypeA     uint16 = 1
	TypeCNAME uint16 = 5
	TypeSOA   uint16 = 6
	TypeAAAA  uint16 = 28
	TypeSRV   uint16 = 33
	typeOPT   uint16 = 41
	ClassINET uint16 = 1
)

// Response codes (RFC 1035 section 4.1.1).
const (
	RCodeSuccess  = 0
	RCodeServFail = 2
	RCodeNXDomain = 3
	RCodeRefused  = 5
)

// UDPSize is the UDP payload size a query advertises in its EDNS(0) OPT
// record: the size DNS Flag Day 2020 recommends, which fits the usual
// path MTU without fragmentation. Longer answers come truncated, and are
// asked again over TCP.
const UDPSize = 1232

// maxNameLen is the longest domain name in wire form (RFC 1035 section
// 2.3.4), and maxPointers bounds the compression pointers followed in
// one name; a name cannot hold more than that many labels.
const (
	maxNameLen  = 255
	maxPointers = 127
)

var (
	// ErrMalformed reports a message that does not parse: short, a
	// name or record running past its end, a pointer loop.
	ErrMalformed = errors.New("dnsmsg: malformed message")
	// ErrBadName reports a name that cannot be queried: empty labels,
	// labels over 63 octets, longer than 255 octets, or bytes other
	// than letters, digits, '-' and '_'.
	ErrBadName = errors.New("dnsmsg: bad domain name")
)

// Record is one resource record of the kinds this package reads. Names
// are in lower case, without the final dot.
type Record struct {
	Name string
	Type uint16
	TTL  uint32
	// Addr is an A or AAAA record's address.
	Addr netip.Addr
	// Target is a CNAME's canonical name or an SRV record's target.
	Target string
	// Priority, Weight and Port are an SRV record's (RFC 2782).
	Priority, Weight, Port uint16
	// MinTTL is an SOA record's minimum field, which with its TTL bounds
	// how long a negative answer may be kept (RFC 2308 section 5).
	MinTTL uint32
}

// Message is a parsed response. Records of other types than A, AAAA,
// CNAME, SRV and SOA are skipped.
type Message struct {
	ID        uint16
	Response  bool // QR: a response, not a query
	Truncated bool // TC: the answer did not fit; ask over TCP
	RCode     int
	// QName and QType are the question's, QName in lower case without
	// the final dot; QType 0 when the message has no question.
	QName string
	QType uint16
	// Answer, Authority and Additional are the sections' records.
	Answer, Authority, Additional []Record
}

// AppendQuery appends to b a recursive query (RD set) for name of type
// qtype with the given ID, with an EDNS(0) OPT record advertising
// [UDPSize]. name is a fully qualified domain name, with or without the
// final dot.
func AppendQuery(b []byte, id uint16, name string, qtype uint16) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, id)
	b = binary.BigEndian.AppendUint16(b, 1<<8) // RD
	b = binary.BigEndian.AppendUint16(b, 1)    // QDCOUNT
	b = binary.BigEndian.AppendUint16(b, 0)    // ANCOUNT
	b = binary.BigEndian.AppendUint16(b, 0)    // NSCOUNT
	b = binary.BigEndian.AppendUint16(b, 1)    // ARCOUNT: the OPT record
	b, err := appendName(b, name)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, ClassINET)
	// OPT (RFC 6891 section 6.1.2): root name, type, the UDP payload
	// size in the class, extended RCODE and flags 0, no options.
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, typeOPT)
	b = binary.BigEndian.AppendUint16(b, UDPSize)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	return b, nil
}

// appendName appends name in wire form, uncompressed.
func appendName(b []byte, name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name)+2 > maxNameLen {
		return nil, ErrBadName
	}
	for label := range strings.SplitSeq(name, ".") {
		if len(label) == 0 || len(label) > 63 || !labelOK(label) {
			return nil, ErrBadName
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	return append(b, 0), nil
}

// labelOK reports whether a label holds only the bytes of a host name
// (letters, digits, '-') and '_', which SRV names use (_svc._tcp).
func labelOK(label string) bool {
	for i := 0; i < len(label); i++ {
		switch c := label[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// CanonicalName returns name as messages name it: lower case, without
// the final dot.
func CanonicalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// Parse parses a response. It checks every length against the message,
// follows compression pointers only backwards and a bounded number of
// times, and returns [ErrMalformed] for anything that does not fit; it
// never panics, whatever b holds.
func Parse(b []byte) (*Message, error) {
	if len(b) < 12 {
		return nil, ErrMalformed
	}
	flags := binary.BigEndian.Uint16(b[2:])
	m := &Message{
		ID:        binary.BigEndian.Uint16(b),
		Response:  flags&(1<<15) != 0,
		Truncated: flags&(1<<9) != 0,
		RCode:     int(flags & 0xf),
	}
	qd := int(binary.BigEndian.Uint16(b[4:]))
	counts := [3]int{int(binary.BigEndian.Uint16(b[6:])), int(binary.BigEndian.Uint16(b[8:])), int(binary.BigEndian.Uint16(b[10:]))}
	off := 12
	for i := range qd {
		name, next, err := readName(b, off)
		if err != nil || next+4 > len(b) {
			return nil, ErrMalformed
		}
		if i == 0 {
			m.QName, m.QType = name, binary.BigEndian.Uint16(b[next:])
		}
		off = next + 4
	}
	sections := [3]*[]Record{&m.Answer, &m.Authority, &m.Additional}
	for s, n := range counts {
		for range n {
			var r Record
			var keep bool
			var err error
			r, keep, off, err = readRecord(b, off)
			if err != nil {
				return nil, err
			}
			if keep {
				*sections[s] = append(*sections[s], r)
			}
		}
	}
	return m, nil
}

// readRecord reads the resource record at off: the record, whether it is
// of a kind Parse keeps, and the offset after it.
func readRecord(b []byte, off int) (Record, bool, int, error) {
	var r Record
	name, off, err := readName(b, off)
	if err != nil || off+10 > len(b) {
		return r, false, 0, ErrMalformed
	}
	r.Name = name
	r.Type = binary.BigEndian.Uint16(b[off:])
	class := binary.BigEndian.Uint16(b[off+2:])
	r.TTL = binary.BigEndian.Uint32(b[off+4:])
	if r.TTL > 1<<31-1 {
		r.TTL = 0 // RFC 2181 section 8: a TTL with the top bit set is zero
	}
	n := int(binary.BigEndian.Uint16(b[off+8:]))
	start := off + 10
	end := start + n
	if end > len(b) {
		return r, false, 0, ErrMalformed
	}
	if class != ClassINET {
		return r, false, end, nil
	}
	rd := b[start:end]
	switch r.Type {
	case TypeA, TypeAAAA:
		if len(rd) != 4 && r.Type == TypeA || len(rd) != 16 && r.Type == TypeAAAA {
			return r, false, 0, ErrMalformed
		}
		r.Addr, _ = netip.AddrFromSlice(rd)
	case TypeCNAME:
		t, next, err := readName(b, start)
		if err != nil || next != end {
			return r, false, 0, ErrMalformed
		}
		r.Target = t
	case TypeSRV:
		if len(rd) < 7 {
			return r, false, 0, ErrMalformed
		}
		r.Priority = binary.BigEndian.Uint16(rd)
		r.Weight = binary.BigEndian.Uint16(rd[2:])
		r.Port = binary.BigEndian.Uint16(rd[4:])
		t, next, err := readName(b, start+6)
		if err != nil || next != end {
			return r, false, 0, ErrMalformed
		}
		r.Target = t
	case TypeSOA:
		// MNAME and RNAME, then five 32-bit fields, MINIMUM last.
		_, next, err := readName(b, start)
		if err == nil {
			_, next, err = readName(b, next)
		}
		if err != nil || next+20 != end {
			return r, false, 0, ErrMalformed
		}
		r.MinTTL = binary.BigEndian.Uint32(b[next+16:])
	default:
		return r, false, end, nil
	}
	return r, true, end, nil
}

// readName reads the possibly compressed name at off (RFC 1035 section
// 4.1.4) and returns it in lower case without the final dot ("" for the
// root), with the offset after its place at off. A pointer must point
// before the label that holds it, so that no loop is possible; labels
// with bytes that a host name cannot hold ('.', spaces, controls) are
// refused rather than escaped.
func readName(b []byte, off int) (string, int, error) {
	var buf [maxNameLen]byte
	n := 0
	end := -1 // the offset after the name where it starts, once a pointer is taken
	for hops := 0; ; {
		if off >= len(b) {
			return "", 0, ErrMalformed
		}
		c := int(b[off])
		switch c & 0xc0 {
		case 0x00:
			if c == 0 {
				if end < 0 {
					end = off + 1
				}
				return string(buf[:max(n-1, 0)]), end, nil
			}
			if off+1+c > len(b) || n+c+1 > maxNameLen-1 {
				return "", 0, ErrMalformed
			}
			for _, x := range b[off+1 : off+1+c] {
				if x <= ' ' || x == '.' || x >= 0x7f {
					return "", 0, ErrMalformed
				}
				if 'A' <= x && x <= 'Z' {
					x += 'a' - 'A'
				}
				buf[n] = x
				n++
			}
			buf[n] = '.'
			n++
			off += 1 + c
		case 0xc0:
			if off+1 >= len(b) {
				return "", 0, ErrMalformed
			}
			p := (c&0x3f)<<8 | int(b[off+1])
			if end < 0 {
				end = off + 2
			}
			if p >= off || hops >= maxPointers {
				return "", 0, ErrMalformed
			}
			hops++
			off = p
		default: // 0x40 and 0x80: extended label types (RFC 6891), unused
			return "", 0, ErrMalformed
		}
	}
}
