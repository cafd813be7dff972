package dnsmsg

import (
	"encoding/binary"
	"errors"
)

// maxChain bounds the CNAME records followed from a question's name.
const maxChain = 8

// Records returns the records of type qtype that answer name in m,
// following the CNAME chain the answer section gives for it, and the
// smallest TTL along the way (of the CNAMEs and the records). A chain
// that leads nowhere, or loops, gives no record.
func (m *Message) Records(name string, qtype uint16) ([]Record, uint32) {
	name = CanonicalName(name)
	ttl := uint32(1<<31 - 1)
	for range maxChain {
		var out []Record
		var cname *Record
		for i := range m.Answer {
			r := &m.Answer[i]
			switch {
			case r.Name != name:
			case r.Type == qtype:
				out = append(out, *r)
				ttl = min(ttl, r.TTL)
			case r.Type == TypeCNAME && cname == nil:
				cname = r
			}
		}
		if len(out) > 0 || cname == nil {
			if len(out) == 0 {
				return nil, 0
			}
			return out, ttl
		}
		ttl = min(ttl, cname.TTL)
		name = cname.Target
	}
	return nil, 0
}

// NegativeTTL is how long the negative answer m (no such name, or no
// record of the type) may be kept: the smaller of its SOA record's TTL
// and minimum field (RFC 2308 section 5), or ok false without an SOA.
func (m *Message) NegativeTTL() (ttl uint32, ok bool) {
	for _, r := range m.Authority {
		if r.Type == TypeSOA {
			return min(r.TTL, r.MinTTL), true
		}
	}
	return 0, false
}

// AdditionalAddrs returns the addresses the additional section gives for
// name (A and AAAA records), as an SRV answer may carry its targets',
// and the smallest of their TTLs.
func (m *Message) AdditionalAddrs(name string) ([]Record, uint32) {
	name = CanonicalName(name)
	var out []Record
	ttl := uint32(1<<31 - 1)
	for _, r := range m.Additional {
		if r.Name == name && (r.Type == TypeA || r.Type == TypeAAAA) {
			out = append(out, r)
			ttl = min(ttl, r.TTL)
		}
	}
	if len(out) == 0 {
		return nil, 0
	}
	return out, ttl
}

// Header is what a response says besides its records.
type Header struct {
	ID                  uint16
	Truncated           bool
	RCode               int
	QName               string
	QType               uint16
	Authoritative, Echo bool // AA; Echo: no question section (a broken server)
}

var errRecord = errors.New("dnsmsg: cannot encode record")

// AppendResponse appends a response with header h and the given
// sections to b, uncompressed: what a test's DNS server sends. Records
// of the types Record describes are encoded from their fields.
func AppendResponse(b []byte, h Header, answer, authority, additional []Record) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, h.ID)
	flags := uint16(1<<15 | 1<<8 | 1<<7) // QR, RD, RA
	if h.Authoritative {
		flags |= 1 << 10
	}
	if h.Truncated {
		flags |= 1 << 9
	}
	flags |= uint16(h.RCode & 0xf)
	b = binary.BigEndian.AppendUint16(b, flags)
	qd := uint16(1)
	if h.Echo {
		qd = 0
	}
	for _, n := range []uint16{qd, uint16(len(answer)), uint16(len(authority)), uint16(len(additional))} {
		b = binary.BigEndian.AppendUint16(b, n)
	}
	var err error
	if qd == 1 {
		if b, err = appendName(b, h.QName); err != nil {
			return nil, err
		}
		b = binary.BigEndian.AppendUint16(b, h.QType)
		b = binary.BigEndian.AppendUint16(b, ClassINET)
	}
	for _, sec := range [][]Record{answer, authority, additional} {
		for _, r := range sec {
			if b, err = appendRecord(b, r); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func appendRecord(b []byte, r Record) ([]byte, error) {
	b, err := appendName(b, r.Name)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint16(b, r.Type)
	b = binary.BigEndian.AppendUint16(b, ClassINET)
	b = binary.BigEndian.AppendUint32(b, r.TTL)
	lenAt := len(b)
	b = append(b, 0, 0)
	switch r.Type {
	case TypeA, TypeAAAA:
		if r.Addr.Is4() != (r.Type == TypeA) || !r.Addr.IsValid() {
			return nil, errRecord
		}
		b = append(b, r.Addr.AsSlice()...)
	case TypeCNAME:
		b, err = appendName(b, r.Target)
	case TypeSRV:
		b = binary.BigEndian.AppendUint16(b, r.Priority)
		b = binary.BigEndian.AppendUint16(b, r.Weight)
		b = binary.BigEndian.AppendUint16(b, r.Port)
		b, err = appendName(b, r.Target)
	case TypeSOA:
		b = append(b, 0, 0)                // root MNAME and RNAME
		b = append(b, make([]byte, 16)...) // serial, refresh, retry, expire
		b = binary.BigEndian.AppendUint32(b, r.MinTTL)
	default:
		return nil, errRecord
	}
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(b[lenAt:], uint16(len(b)-lenAt-2))
	return b, nil
}
