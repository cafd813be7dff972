package relay

import (
	"fmt"
	"strings"

	"github.com/zeroio/zeroio/internal/tlshello"
)

// routeTable is the set of routes sharing one listen address (a front),
// arranged to pick one from a client's TLS ClientHello. It is immutable: a
// reload builds a new one and swaps it in.
//
// The most specific route wins: a route naming the server name exactly,
// then the one with the longest matching wildcard, then routes without
// SNI. Among routes with the same name (or none), one whose ALPN list
// holds the protocol the client prefers most wins, then the route with
// no ALPN list. The route with neither SNI nor ALPN is the default: it
// takes clients that send no ClientHello, no server name, or one nothing
// else matches.
type routeTable struct {
	routes []*route             // every route, in configuration order
	exact  map[string]*sniEntry // by lower-case server name
	wild   map[string]*sniEntry // "*.example.com" under ".example.com"
	any    sniEntry             // routes without SNI
	hello  bool                 // some route has SNI or ALPN
}

// sniEntry holds the routes that give one name (or none).
type sniEntry struct {
	alpn  map[string]*route // by ALPN protocol
	plain *route            // the route without ALPN
}

// newRouteTable arranges rts. If two of them can match the same client
// equally well, the error names them, and the first added wins.
func newRouteTable(rts []*route) (*routeTable, error) {
	t := &routeTable{routes: rts, exact: map[string]*sniEntry{}, wild: map[string]*sniEntry{}}
	var first error
	for _, rt := range rts {
		r := rt.cfg.Load()
		if len(r.SNI) > 0 || len(r.ALPN) > 0 {
			t.hello = true
		}
		var entries []*sniEntry
		if len(r.SNI) == 0 {
			entries = append(entries, &t.any)
		}
		for _, name := range r.SNI {
			m, key := t.exact, name
			if suffix, ok := strings.CutPrefix(name, "*"); ok {
				m, key = t.wild, suffix
			}
			e := m[key]
			if e == nil {
				e = &sniEntry{}
				m[key] = e
			}
			if !contains1(entries, e) { // a name listed twice in one route
				entries = append(entries, e)
			}
		}
		for _, e := range entries {
			if err := e.add(rt, r); err != nil && first == nil {
				first = err
			}
		}
	}
	return t, first
}

func contains1(es []*sniEntry, e *sniEntry) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// add puts rt, configured as r, in e.
func (e *sniEntry) add(rt *route, r *Route) error {
	if len(r.ALPN) == 0 {
		if e.plain != nil && e.plain != rt {
			return ambiguous(e.plain, rt)
		}
		e.plain = rt
		return nil
	}
	if e.alpn == nil {
		e.alpn = map[string]*route{}
	}
	for _, p := range r.ALPN {
		if o := e.alpn[p]; o != nil && o != rt {
			return ambiguous(o, rt)
		}
		e.alpn[p] = rt
	}
	return nil
}

func ambiguous(a, b *route) error {
	ra, rb := a.cfg.Load(), b.cfg.Load()
	return fmt.Errorf("routes %q and %q on %s can match the same client (same sni %s, alpn %s and %s): give them different names or ALPN protocols", a.name, b.name, ra.Listen, listOrAny(overlap(ra.SNI, rb.SNI)), listOrAny(ra.ALPN), listOrAny(rb.ALPN))
}

func overlap(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

func listOrAny(l []string) string {
	if len(l) == 0 {
		return "any"
	}
	return "[" + strings.Join(l, ",") + "]"
}

// needsHello reports whether the routes are told apart by the ClientHello;
// if not, only returns the route and no byte need be read before dialing.
func (t *routeTable) needsHello() bool { return t.hello }

// only returns the single route of a table that needs no hello: its
// default, or nil if it has none.
func (t *routeTable) only() *route { return t.any.plain }

// match returns the route for a client's hello, nil meaning none was sent
// (or it was not TLS); nil if no route takes the client. It allocates
// nothing.
func (t *routeTable) match(h *tlshello.Info) *route {
	if h == nil {
		return t.any.plain
	}
	if name := h.ServerName(); len(name) > 0 {
		if rt := t.exact[string(name)].pick(h); rt != nil {
			return rt
		}
		// Wildcards, longest first: for a.b.example.com, .b.example.com,
		// then .example.com, then .com.
		for i := 0; i < len(name); i++ {
			if name[i] != '.' {
				continue
			}
			if rt := t.wild[string(name[i:])].pick(h); rt != nil {
				return rt
			}
		}
	}
	return t.any.pick(h)
}

// pick returns the route of e for h: the first of the client's ALPN
// protocols that a route lists, else the route without ALPN.
func (e *sniEntry) pick(h *tlshello.Info) *route {
	if e == nil {
		return nil
	}
	if len(e.alpn) > 0 {
		for i := range h.NumALPN() {
			if rt := e.alpn[string(h.ALPN(i))]; rt != nil {
				return rt
			}
		}
	}
	return e.plain
}

// checkSNI normalizes a route's SNI and ALPN lists (lower case, no
// trailing dot) and says what is wrong with them.
func checkSNI(r *Route) error {
	sni := make([]string, len(r.SNI))
	for i, n := range r.SNI {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		host, wild := strings.CutPrefix(n, "*.")
		if !validHost(host) {
			return fmt.Errorf("sni %q: want a host name (a.example.com) or a wildcard (*.example.com)", r.SNI[i])
		}
		if wild {
			n = "*." + host
		}
		sni[i] = n
	}
	r.SNI = sni
	for _, p := range r.ALPN {
		if p == "" || len(p) > 255 {
			return fmt.Errorf("alpn %q: want a protocol name of 1 to 255 bytes (h2, http/1.1)", p)
		}
	}
	return nil
}

// validHost reports whether s is a lower-case DNS name as a ClientHello
// carries it: labels of letters, digits, '-' and '_', at most 253 bytes.
func validHost(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
