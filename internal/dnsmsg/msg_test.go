package dnsmsg

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func srv(name string, prio, weight, port uint16, target string, ttl uint32) Record {
	return Record{Name: name, Type: TypeSRV, TTL: ttl, Priority: prio, Weight: weight, Port: port, Target: target}
}

func addr(name, ip string, ttl uint32) Record {
	a := netip.MustParseAddr(ip)
	t := TypeA
	if a.Is6() {
		t = TypeAAAA
	}
	return Record{Name: name, Type: t, TTL: ttl, Addr: a}
}

func TestQueryParsesAsItsQuestion(t *testing.T) {
	q, err := AppendQuery(nil, 0xbeef, "_Svc._tcp.Example.TEST.", TypeSRV)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 0xbeef || m.Response || m.QName != "_svc._tcp.example.test" || m.QType != TypeSRV {
		t.Fatalf("parsed query: %+v", m)
	}
}

func TestQueryRefusesBadNames(t *testing.T) {
	long := ""
	for range 26 {
		long += "abcdefghij"
	}
	for _, name := range []string{"", ".", "a..b", "a b.c", "a/b", long, string(make([]byte, 64)) + ".x"} {
		if _, err := AppendQuery(nil, 1, name, TypeA); !errors.Is(err, ErrBadName) {
			t.Errorf("%q: err %v, want ErrBadName", name, err)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	ans := []Record{
		srv("_svc._tcp.example.test", 10, 5, 8080, "a.example.test", 30),
		srv("_svc._tcp.example.test", 20, 0, 8081, "b.example.test", 60),
	}
	add := []Record{addr("a.example.test", "192.0.2.1", 7), addr("a.example.test", "2001:db8::1", 9)}
	auth := []Record{{Name: "example.test", Type: TypeSOA, TTL: 40, MinTTL: 20}}
	b, err := AppendResponse(nil, Header{ID: 7, QName: "_svc._tcp.example.test", QType: TypeSRV}, ans, auth, add)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Response || m.ID != 7 || m.RCode != 0 || m.Truncated {
		t.Fatalf("header %+v", m)
	}
	if !slices.Equal(m.Answer, ans) || !slices.Equal(m.Additional, add) || len(m.Authority) != 1 {
		t.Fatalf("sections:\n%+v\n%+v\n%+v", m.Answer, m.Authority, m.Additional)
	}
	rs, ttl := m.Records("_svc._tcp.example.test.", TypeSRV)
	if len(rs) != 2 || ttl != 30 {
		t.Fatalf("Records: %v ttl %d", rs, ttl)
	}
	as, ttl := m.AdditionalAddrs("A.example.test")
	if len(as) != 2 || ttl != 7 {
		t.Fatalf("AdditionalAddrs: %v ttl %d", as, ttl)
	}
	if n, ok := m.NegativeTTL(); !ok || n != 20 {
		t.Fatalf("NegativeTTL %d %v", n, ok)
	}
}

func TestRecordsFollowsCNAMEs(t *testing.T) {
	m := &Message{Answer: []Record{
		{Name: "www.example.test", Type: TypeCNAME, TTL: 50, Target: "web.example.test"},
		{Name: "web.example.test", Type: TypeCNAME, TTL: 3, Target: "host.example.test"},
		addr("host.example.test", "192.0.2.1", 100),
		addr("host.example.test", "192.0.2.2", 90),
		addr("other.example.test", "192.0.2.9", 1),
	}}
	rs, ttl := m.Records("www.example.test", TypeA)
	if len(rs) != 2 || ttl != 3 {
		t.Fatalf("got %v ttl %d, want the two host addresses, ttl 3", rs, ttl)
	}
	loop := &Message{Answer: []Record{
		{Name: "a.test", Type: TypeCNAME, TTL: 5, Target: "b.test"},
		{Name: "b.test", Type: TypeCNAME, TTL: 5, Target: "a.test"},
	}}
	if rs, _ := loop.Records("a.test", TypeA); rs != nil {
		t.Fatalf("a CNAME loop gave %v", rs)
	}
}

func TestParseCompressedNames(t *testing.T) {
	// A response whose answer names the question by pointer (0xc00c),
	// and whose SRV target points into it: example.test at offset 17.
	b := []byte{0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}
	b = append(b, 4, '_', 's', 'v', 'c', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 4, 't', 'e', 's', 't', 0, 0, 33, 0, 1)
	b = append(b, 0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 60, 0, 10, 0, 1, 0, 2, 0, 80, 1, 'x', 0xc0, 17)
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := srv("_svc.example.test", 1, 2, 80, "x.example.test", 60)
	if len(m.Answer) != 1 || m.Answer[0] != want {
		t.Fatalf("got %+v, want %+v", m.Answer, want)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	good, _ := AppendResponse(nil, Header{ID: 1, QName: "a.test", QType: TypeA}, []Record{addr("a.test", "192.0.2.1", 5)}, nil, nil)
	cases := map[string][]byte{
		"short header":    good[:11],
		"cut in question": good[:16],
		"cut in record":   good[:len(good)-2],
		"pointer forward": append(append([]byte{}, good[:12]...), 0xc0, 14, 0, 1, 0, 1),
		"pointer to self": append(append([]byte{}, good[:12]...), 0xc0, 12, 0, 1, 0, 1),
		"extended label":  append(append([]byte{}, good[:12]...), 0x41, 0, 0, 1, 0, 1),
		"dot in label":    append(append([]byte{}, good[:12]...), 3, 'a', '.', 'b', 0, 0, 1, 0, 1),
		"A of 3 octets":   fix(good, -1),
		"count past end":  withCount(good, 6, 2),
		"label past end":  append(append([]byte{}, good[:12]...), 60, 'a'),
	}
	for name, b := range cases {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// fix shortens the last record's data by d octets, keeping its length
// field in step.
func fix(b []byte, d int) []byte {
	out := append([]byte{}, b[:len(b)+d]...)
	n := len(out) - 4 - 2
	out[n+1] = byte(int(out[n+1]) + d)
	return out
}

func withCount(b []byte, at, n int) []byte {
	out := append([]byte{}, b...)
	out[at], out[at+1] = byte(n>>8), byte(n)
	return out
}
