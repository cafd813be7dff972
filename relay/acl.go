package relay

import "net/netip"

// allowed applies a route's access lists to a client address: a match in
// deny refuses; otherwise, if allow is not empty, only a match in allow
// admits. A client without an IP address (a Unix socket peer) is admitted
// only when allow is empty.
func allowed(allow, deny []netip.Prefix, ip netip.Addr) bool {
	if !ip.IsValid() {
		return len(allow) == 0
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range deny {
		if p.Contains(ip) {
			return false
		}
	}
	if len(allow) == 0 {
		return true
	}
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// contains reports whether any prefix holds ip.
func contains(ps []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// unmapHeader gives the addresses of a PROXY header as the relay's own
// accepted sockets give them: a proxy's dual-stack socket sends an IPv4
// client as TCP6 ::ffff:192.0.2.7, which is 192.0.2.7, so that one
// client counts once under MaxConnsPerClient and reads alike in the
// connection log and the PROXY header sent on. Only a pair mapped on
// both sides is unmapped: a header is of one family.
func unmapHeader(src, dst netip.AddrPort) (netip.AddrPort, netip.AddrPort) {
	if src.Addr().Is4In6() && (!dst.IsValid() || dst.Addr().Is4In6()) {
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		if dst.IsValid() {
			dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
		}
	}
	return src, dst
}
