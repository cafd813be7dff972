package relay

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// checkFronts checks the routes that share a listen address (a front):
// they must agree on how the address listens and reads a client's first
// bytes, and no two may match the same client equally. It also refuses
// listen addresses that overlap (see Route.ListenOverlap).
func checkFronts(routes []Route) []error {
	var errs []error
	groups := map[string][]int{}
	var keys []string
	for i := range routes {
		r := &routes[i]
		if r.Listen.Network == "" {
			continue
		}
		k := frontKey(r)
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	errs = append(errs, checkSpellings(routes)...)
	for _, k := range keys {
		g := groups[k]
		first := &routes[g[0]]
		var rts []*route
		for _, i := range g {
			r := &routes[i]
			if d := frontDiff(first, r); d != "" {
				errs = append(errs, fmt.Errorf("routes %q and %q share listen address %s but differ in %s: set it the same on both", first.Name, r.Name, r.Listen, d))
			}
			rts = append(rts, newRouteConf(*r))
		}
		if _, err := newRouteTable(rts); err != nil {
			errs = append(errs, err)
		}
	}
	return append(errs, checkOverlap(routes)...)
}

// checkSpellings refuses routes that would bind one socket address twice,
// which would fail with "address in use" only at start: routes of either
// kind on one address written two ways (tcp://127.0.0.1:80 and
// tcp4://127.0.0.1:80, [::1] and [0::1]), which would not share it.
func checkSpellings(routes []Route) []error {
	var errs []error
	seen := map[string]*Route{}
	for i := range routes {
		r := &routes[i]
		k := r.Listen.bindKey()
		if k == "" {
			continue
		}
		o := seen[k]
		switch {
		case o == nil:
			seen[k] = r
		case o.Listen != r.Listen:
			errs = append(errs, fmt.Errorf("routes %q (%s) and %q (%s) listen on one address written two ways: write it the same in both", o.Name, o.Listen, r.Name, r.Listen))
		}
	}
	return errs
}

// newRouteConf is a route holding r alone, for checks.
func newRouteConf(r Route) *route {
	rt := &route{name: r.Name}
	rt.cfg.Store(&r)
	return rt
}

// frontDiff names the first listener-level setting in which a and b
// differ, or returns "".
func frontDiff(a, b *Route) string {
	switch {
	case a.Workers != b.Workers:
		return "workers"
	case a.UDPBuffer != b.UDPBuffer:
		return "udp_buffer"
	case a.AcceptProxy != b.AcceptProxy:
		return "accept_proxy"
	case !slices.Equal(a.TrustedProxies, b.TrustedProxies):
		return "trusted_proxies"
	case a.ProxyHeaderTimeout != b.ProxyHeaderTimeout:
		return "proxy_header_timeout"
	case a.PeekTimeout != b.PeekTimeout:
		return "peek_timeout"
	case a.UnixMode != b.UnixMode || a.UnixUser != b.UnixUser || a.UnixGroup != b.UnixGroup:
		return "unix_mode, unix_user or unix_group"
	}
	return ""
}

// checkOverlap refuses a wildcard listen address (0.0.0.0, ::) and a
// specific one on the same port and protocol, unless one of the two
// routes sets ListenOverlap.
func checkOverlap(routes []Route) []error {
	type bound struct {
		r    *Route
		ip   netip.Addr
		v6   bool   // a v6 address family only (tcp6, udp6)
		key  string // protocol and port
		list string
	}
	var bs []bound
	for i := range routes {
		r := &routes[i]
		if r.Listen.Network == "unix" || r.Listen.Network == "" || r.Listen.port() == 0 {
			continue
		}
		host, port, err := net.SplitHostPort(r.Listen.Address)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			continue // a host name: which addresses it binds is the resolver's
		}
		proto := strings.TrimRight(r.Listen.Network, "46")
		ip = ip.WithZone("").Unmap()
		bs = append(bs, bound{r, ip, strings.HasSuffix(r.Listen.Network, "6"), proto + " " + port, r.Listen.String()})
	}
	var errs []error
	for i, a := range bs {
		for _, b := range bs[i+1:] {
			// A wildcard covers its own family, and :: on a dual-stack
			// socket (tcp, udp) IPv4 too.
			covers := func(w, o bound) bool {
				return w.ip.IsUnspecified() && (w.ip.Is4() == o.ip.Is4() || (w.ip.Is6() && !w.v6))
			}
			if a.key != b.key || a.ip == b.ip || !(covers(a, b) || covers(b, a)) {
				continue
			}
			if a.r.ListenOverlap || b.r.ListenOverlap {
				continue
			}
			errs = append(errs, fmt.Errorf("routes %q (%s) and %q (%s) overlap: the wildcard address takes the port on every address, so one route would shadow the other; set listen_overlap on one of them to allow it", a.r.Name, a.list, b.r.Name, b.list))
		}
	}
	return errs
}
