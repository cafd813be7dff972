package relay

import (
	"strings"
	"testing"

	"github.com/zeroio/zeroio/internal/tlshello"
	"github.com/zeroio/zeroio/internal/tlshello/hellotest"
)

// hello builds a parsed ClientHello with a server name and ALPN list.
func hello(t *testing.T, sni string, alpn ...string) *tlshello.Info {
	t.Helper()
	var h tlshello.Info
	if err := tlshello.Parse(hellotest.Build(sni, alpn), &h); err != nil {
		t.Fatalf("hello %q %q: %v", sni, alpn, err)
	}
	return &h
}

func testTable(t *testing.T, routes []Route) (*routeTable, error) {
	t.Helper()
	var rts []*route
	for _, r := range routes {
		r.Listen = Addr{Network: "tcp", Address: "127.0.0.1:443"}
		if err := checkSNI(&r); err != nil {
			t.Fatalf("route %s: %v", r.Name, err)
		}
		rts = append(rts, newRouteConf(r))
	}
	return newRouteTable(rts)
}

func TestMatch(t *testing.T) {
	tb, err := testTable(t, []Route{
		{Name: "a", SNI: []string{"a.example.com", "*.a.example.com"}},
		{Name: "b-h2", SNI: []string{"B.example.com."}, ALPN: []string{"h2"}},
		{Name: "b", SNI: []string{"b.example.com"}},
		{Name: "wild", SNI: []string{"*.example.com"}},
		{Name: "deep", SNI: []string{"*.x.y.example.com"}},
		{Name: "acme", ALPN: []string{"acme-tls/1"}},
		{Name: "default"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tb.needsHello() {
		t.Fatal("needsHello = false")
	}
	for _, tc := range []struct {
		sni  string
		alpn []string
		want string
	}{
		{"a.example.com", nil, "a"},
		{"A.EXAMPLE.COM", nil, "a"},
		{"x.a.example.com", nil, "a"},
		{"x.y.a.example.com", nil, "a"},
		{"b.example.com", []string{"h2", "http/1.1"}, "b-h2"},
		{"b.example.com", []string{"http/1.1", "h2"}, "b-h2"},
		{"b.example.com", []string{"http/1.1"}, "b"},
		{"b.example.com", nil, "b"},
		{"c.example.com", []string{"h2"}, "wild"},
		{"z.x.y.example.com", nil, "deep"},
		{"x.y.example.com", nil, "wild"},
		{"example.com", nil, "default"},
		{"other.org", []string{"acme-tls/1"}, "acme"},
		{"", []string{"acme-tls/1"}, "acme"},
		{"", nil, "default"},
		{"a.example.com", []string{"acme-tls/1"}, "a"},
	} {
		got := tb.match(hello(t, tc.sni, tc.alpn...))
		if got == nil || got.name != tc.want {
			t.Errorf("%q %q: got %v, want %s", tc.sni, tc.alpn, got, tc.want)
		}
	}
	if got := tb.match(nil); got == nil || got.name != "default" {
		t.Errorf("no hello: got %v, want default", got)
	}
}

func TestMatchNoDefault(t *testing.T) {
	tb, err := testTable(t, []Route{{Name: "a", SNI: []string{"a.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*tlshello.Info{nil, hello(t, ""), hello(t, "b.example")} {
		if got := tb.match(h); got != nil {
			t.Errorf("got %s, want none", got.name)
		}
	}
	if got := tb.match(hello(t, "a.example")); got == nil {
		t.Error("a.example unmatched")
	}
	single, _ := testTable(t, []Route{{Name: "only"}})
	if single.needsHello() || single.only() == nil {
		t.Error("a single plain route needs a hello")
	}
}

func TestMatchAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routes []Route
	}{
		{"two defaults", []Route{{Name: "x"}, {Name: "y"}}},
		{"same name", []Route{{Name: "x", SNI: []string{"a.example"}}, {Name: "y", SNI: []string{"b.example", "A.example"}}}},
		{"same wildcard", []Route{{Name: "x", SNI: []string{"*.example"}}, {Name: "y", SNI: []string{"*.EXAMPLE"}}}},
		{"same alpn", []Route{{Name: "x", SNI: []string{"a.example"}, ALPN: []string{"h2", "x"}}, {Name: "y", SNI: []string{"a.example"}, ALPN: []string{"h2"}}}},
		{"alpn only twice", []Route{{Name: "x", ALPN: []string{"h2"}}, {Name: "y", ALPN: []string{"h2"}}}},
	} {
		_, err := testTable(t, tc.routes)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `"x" and "y"`) {
			t.Errorf("%s: err = %v, want one line naming x and y", tc.name, err)
		}
	}
	// Not ambiguous: different ALPN under one name; the same name exact
	// and as a wildcard base; a route listing one name twice.
	if _, err := testTable(t, []Route{
		{Name: "x", SNI: []string{"a.example"}, ALPN: []string{"h2"}},
		{Name: "y", SNI: []string{"a.example"}, ALPN: []string{"http/1.1"}},
		{Name: "z", SNI: []string{"*.a.example", "b.example", "b.example"}},
	}); err != nil {
		t.Error(err)
	}
}

func TestCheckSNI(t *testing.T) {
	for _, tc := range []struct {
		r  Route
		ok bool
	}{
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, SNI: []string{"a.example", "*.b.example", "Xn--Caf-Dma.example."}}, true},
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, SNI: []string{"*"}}, false},
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, SNI: []string{"a.*.example"}}, false},
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, SNI: []string{"a..example"}}, false},
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, SNI: []string{"café.example"}}, false},
		{Route{Listen: Addr{"tcp", "127.0.0.1:1"}, ALPN: []string{""}}, false},
		{Route{Listen: Addr{"udp", "127.0.0.1:1"}, SNI: []string{"a.example"}}, true},
		{Route{Listen: Addr{"udp", "127.0.0.1:1"}, ALPN: []string{"h3"}}, true},
	} {
		err := checkSNI(&tc.r)
		if (err == nil) != tc.ok || (err != nil && strings.Contains(err.Error(), "\n")) {
			t.Errorf("%v %v: err = %v, want ok=%v", tc.r.SNI, tc.r.ALPN, err, tc.ok)
		}
	}
}

// TestConfigFronts: routes sharing an address must agree on how it
// listens; wildcard and specific addresses of one port overlap.
func TestConfigFronts(t *testing.T) {
	tg := Addr{"tcp", "127.0.0.1:1"}
	l := Addr{"tcp", "127.0.0.1:8443"}
	for _, tc := range []struct {
		name   string
		routes []Route
		want   string // in the error; "" is no error
	}{
		{"shared", []Route{{Name: "a", Listen: l, Target: tg, SNI: []string{"a.example"}}, {Name: "b", Listen: l, Target: tg}}, ""},
		{"workers differ", []Route{{Name: "a", Listen: l, Target: tg, SNI: []string{"a.example"}, Workers: 2}, {Name: "b", Listen: l, Target: tg}}, "differ in workers"},
		{"peek differs", []Route{{Name: "a", Listen: l, Target: tg, SNI: []string{"a.example"}, PeekTimeout: 1}, {Name: "b", Listen: l, Target: tg}}, "differ in peek_timeout"},
		{"udp sni", []Route{{Name: "a", Listen: Addr{"udp", "127.0.0.1:53"}, Target: Addr{"udp", "127.0.0.1:54"}, SNI: []string{"a.example"}}}, ""},
		{"udp shared", []Route{{Name: "a", Listen: Addr{"udp", "127.0.0.1:53"}, Target: Addr{"udp", "127.0.0.1:54"}, SNI: []string{"a.example"}}, {Name: "b", Listen: Addr{"udp", "127.0.0.1:53"}, Target: Addr{"udp", "127.0.0.1:54"}}}, ""},
		{"udp twice", []Route{{Name: "a", Listen: Addr{"udp", "127.0.0.1:53"}, Target: Addr{"udp", "127.0.0.1:54"}}, {Name: "b", Listen: Addr{"udp", "127.0.0.1:53"}, Target: Addr{"udp", "127.0.0.1:54"}}}, "can match the same client"},
		{"overlap", []Route{{Name: "a", Listen: Addr{"tcp", "0.0.0.0:8443"}, Target: tg}, {Name: "b", Listen: l, Target: tg}}, "overlap"},
		{"overlap v6 dual stack", []Route{{Name: "a", Listen: Addr{"tcp", "[::]:8443"}, Target: tg}, {Name: "b", Listen: l, Target: tg}}, "overlap"},
		{"no overlap v6 only", []Route{{Name: "a", Listen: Addr{"tcp6", "[::]:8443"}, Target: tg}, {Name: "b", Listen: l, Target: tg}}, ""},
		{"no overlap other port", []Route{{Name: "a", Listen: Addr{"tcp", "0.0.0.0:8444"}, Target: tg}, {Name: "b", Listen: l, Target: tg}}, ""},
		{"no overlap tcp udp", []Route{{Name: "a", Listen: Addr{"udp", "0.0.0.0:8443"}, Target: Addr{"udp", "127.0.0.1:1"}}, {Name: "b", Listen: l, Target: tg}}, ""},
		{"overlap allowed", []Route{{Name: "a", Listen: Addr{"tcp", "0.0.0.0:8443"}, Target: tg, ListenOverlap: true}, {Name: "b", Listen: l, Target: tg}}, ""},
	} {
		_, err := New(Config{Routes: tc.routes})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: err = %v, want one line with %q", tc.name, err, tc.want)
		}
	}
}

func TestMatchAllocs(t *testing.T) {
	tb, _ := testTable(t, []Route{
		{Name: "a", SNI: []string{"*.example.com"}, ALPN: []string{"h2"}},
		{Name: "d"},
	})
	h := hello(t, "x.y.example.com", "http/1.1", "h2")
	if n := testing.AllocsPerRun(100, func() { tb.match(h) }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}
