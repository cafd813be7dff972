package dnsmsg

import (
	"testing"
)

// FuzzParse feeds Parse anything, seeded with queries, responses of every
// record kind it reads, and a compressed one, and checks what must hold
// whatever the input: no panic, and a parsed message whose names are as
// documented and whose records re-encode and parse to themselves.
func FuzzParse(f *testing.F) {
	q, _ := AppendQuery(nil, 1, "_svc._tcp.example.test", TypeSRV)
	f.Add(q)
	full, _ := AppendResponse(nil, Header{ID: 2, QName: "_svc._tcp.example.test", QType: TypeSRV},
		[]Record{srv("_svc._tcp.example.test", 1, 2, 80, "a.example.test", 5), {Name: "_svc._tcp.example.test", Type: TypeCNAME, TTL: 1, Target: "b.test"}},
		[]Record{{Name: "example.test", Type: TypeSOA, TTL: 9, MinTTL: 3}},
		[]Record{addr("a.example.test", "192.0.2.1", 5), addr("a.example.test", "2001:db8::1", 5)})
	f.Add(full)
	neg, _ := AppendResponse(nil, Header{ID: 3, RCode: RCodeNXDomain, QName: "x.test", QType: TypeA, Truncated: true}, nil, nil, nil)
	f.Add(neg)
	f.Add([]byte{0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4})
	f.Add([]byte{0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if m != nil {
				t.Fatal("a message with an error")
			}
			return
		}
		if len(m.QName) > maxNameLen {
			t.Fatalf("question name of %d bytes", len(m.QName))
		}
		m.Records(m.QName, m.QType)
		m.NegativeTTL()
		for _, sec := range [][]Record{m.Answer, m.Authority, m.Additional} {
			for _, r := range sec {
				if r.TTL > 1<<31-1 {
					t.Fatalf("TTL %d above 2^31-1", r.TTL)
				}
				if r.Name == "" || (r.Type == TypeSRV || r.Type == TypeCNAME) && r.Target == "" {
					continue // the root cannot be re-encoded as a query name
				}
				enc, err := AppendResponse(nil, Header{QName: "a.test", QType: TypeA}, []Record{r}, nil, nil)
				if err != nil {
					continue // names with bytes a query may not hold
				}
				back, err := Parse(enc)
				if err != nil || len(back.Answer) != 1 || back.Answer[0] != r {
					t.Fatalf("record %+v re-encoded parses as %+v, %v", r, back, err)
				}
			}
		}
	})
}
