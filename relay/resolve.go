package relay

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Name resolution of targets, the same for both stream engines and for
// UDP routes. What is looked up is a target's host:port: an IP literal
// is taken as it is, a host name is asked of the resolver in the family
// its network names (tcp4/udp4: IPv4, tcp6/udp6: IPv6, else both), a
// port name as /etc/services gives it. Of several addresses, IPv4 ones
// come first (as package net's dialer and net.ResolveUDPAddr prefer
// them on the usual systems), then the others in the resolver's order,
// at most maxAddrs: a stream dial tries them in turn when a connect
// fails, each address with its share of the attempt's time (addrShare),
// and a UDP session goes to the first. A lookup that fails, or gives no
// usable address, is the target's failure: a stream attempt fails and
// the target is marked down, as a refused connect does; a UDP target is
// down until a lookup succeeds, or keeps its last address. An engine
// decides only how it waits for an answer: the goroutine engine asks on
// every dial and waits; the event engine asks off its loop and keeps
// the answer for streamTTL.

// streamResolver is the resolver of every target lookup; tests replace
// it to give a name several addresses.
var streamResolver = net.DefaultResolver

// lookupNetIP looks a host name up, through streamResolver; tests replace
// it to change what a name resolves to.
var lookupNetIP = func(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return streamResolver.LookupNetIP(ctx, network, host)
}

// streamTTL is how long an event loop keeps a stream target's answer
// (IP literals and Unix paths: for good). A name's change reaches new
// connections within it.
const streamTTL = 5 * time.Second

// resolveEvery is how often a UDP target given by host name is looked up
// again, for the sessions that open after: a DNS change reaches new
// sessions within this time, while a session under way keeps its address.
var resolveEvery = 30 * time.Second

// resolveTimeout bounds one lookup of a UDP target's host name, which has
// no dial plan to take a bound from; a stream lookup is bounded by its
// dial (dialPlan.lookupTimeout).
const resolveTimeout = 5 * time.Second

// maxAddrs bounds the addresses of one name a connection tries.
const maxAddrs = 8

// literalTarget returns the address of a target given as an IP literal
// and a numeric port, without a zone, with no lookup and no allocation.
func literalTarget(a Addr) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(a.Address)
	if err != nil || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// resolveTarget returns the addresses of a (not a Unix path), in the
// order they are to be tried, and whether a names a host (to be looked
// up again later) rather than an IP. The lookup ends with ctx or after
// timeout (0: no bound, as under [Never]).
func resolveTarget(ctx context.Context, a Addr, timeout time.Duration) ([]netip.AddrPort, bool, error) {
	if ap, ok := literalTarget(a); ok {
		return []netip.AddrPort{ap}, false, nil
	}
	host, ps, err := net.SplitHostPort(a.Address)
	if err != nil {
		return nil, false, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		p, perr := streamResolver.LookupPort(ctx, a.Network, ps)
		if perr != nil {
			return nil, false, perr
		}
		port = uint64(p)
	}
	if ip, err := netip.ParseAddr(host); err == nil { // a zoned literal
		return []netip.AddrPort{netip.AddrPortFrom(ip.Unmap(), uint16(port))}, false, nil
	}
	ips, err := lookupNetIP(ctx, ipNetwork(a.Network), host)
	if err != nil {
		return nil, true, err
	}
	return orderAddrs(host, ips, uint16(port))
}

// ipNetwork is the family to look a name up in for a target's network.
func ipNetwork(network string) string {
	switch network {
	case "tcp4", "udp4":
		return "ip4"
	case "tcp6", "udp6":
		return "ip6"
	}
	return "ip"
}

// orderAddrs puts a name's usable addresses in the order they are tried:
// IPv4 first, then the others, each in the resolver's order, at most
// maxAddrs. Zoned addresses are left out.
func orderAddrs(host string, ips []netip.Addr, port uint16) ([]netip.AddrPort, bool, error) {
	var v4, v6 []netip.AddrPort
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.Zone() != "" {
			continue
		}
		if ip.Is4() {
			v4 = append(v4, netip.AddrPortFrom(ip, port))
		} else {
			v6 = append(v6, netip.AddrPortFrom(ip, port))
		}
	}
	all := append(v4, v6...)
	if len(all) == 0 {
		return nil, true, &net.DNSError{Err: "no usable address", Name: host, IsNotFound: true}
	}
	return all[:min(len(all), maxAddrs)], true, nil
}

// addrShare is when a connect to one of a name's addresses, started at
// now within an attempt that must end at end (0: no bound), must end
// when left more addresses wait after it: the attempt's time is shared
// among them, as package net's dialer shares it (partialDeadline), so
// that one address that leaves a connect unanswered leaves time to the
// others.
func addrShare(now, end int64, left int) int64 {
	if end == 0 || left <= 0 {
		return end
	}
	return now + (end-now)/int64(left+1)
}
