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
