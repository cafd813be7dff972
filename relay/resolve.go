package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/zeroio/zeroio/internal/dnsmsg"
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
	all := sortAddrs(ips, port, maxAddrs)
	if len(all) == 0 {
		return nil, true, &net.DNSError{Err: "no usable address", Name: host, IsNotFound: true}
	}
	return all, true, nil
}

// sortAddrs is orderAddrs's order, at most most addresses, none for
// none: IPv4 first, then the others, each in the resolver's order,
// repeats and zoned addresses left out.
func sortAddrs(ips []netip.Addr, port uint16, most int) []netip.AddrPort {
	var v4, v6 []netip.AddrPort
	for _, ip := range ips {
		ip = ip.Unmap()
		ap := netip.AddrPortFrom(ip, port)
		switch {
		case ip.Zone() != "" || slices.Contains(v4, ap) || slices.Contains(v6, ap):
		case ip.Is4():
			v4 = append(v4, ap)
		default:
			v6 = append(v6, ap)
		}
	}
	all := append(v4, v6...)
	return all[:min(len(all), most)]
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

// Discovery: a dynamic target (an SRV name, or a host name with
// ResolveAll) stands for the backends its DNS answer gives, each an IP
// address and port, in the order sortAddrs gives a name's addresses, at
// most MaxTargets. Its names are asked of the relay's DNS client
// (Config.Resolver, or the servers of /etc/resolv.conf), which gives the
// TTLs that tell when to ask again; they are taken as fully qualified
// (no search domains, no /etc/hosts).

// found is one backend a dynamic target's answer gives.
type found struct {
	addr   Addr // an IP address and port
	weight int
	prio   uint16 // an SRV record's priority; lower first
}

// lookupDynamic asks for the backends of the dynamic target t and how
// long the answer may be kept (seconds, before the bounds). An answer
// with no record is no error: no backend.
func lookupDynamic(ctx context.Context, c *dnsmsg.Client, t Target) ([]found, uint32, error) {
	if t.Addr.isSRV() {
		return lookupSRV(ctx, c, t.Addr)
	}
	host, ps, err := net.SplitHostPort(t.Addr.Address)
	if err != nil {
		return nil, 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("target %s: a target resolved to all its addresses needs a numeric port", t.Addr)
	}
	as, err := c.LookupAddrs(ctx, host, ipNetwork(t.Addr.Network))
	if err != nil {
		return nil, 0, err
	}
	var out []found
	for _, ap := range sortAddrs(as.IPs, uint16(port), MaxTargets) {
		out = append(out, found{addr: Addr{Network: t.Addr.Network, Address: ap.String()}, weight: t.Weight})
	}
	return out, as.TTL, nil
}

// lookupSRV asks for the records of the SRV name a and the addresses of
// their targets (from the answer's additional section, else asked for):
// each address a backend with its record's port, priority and weight
// (srvWeights). A record whose target is "." offers no service (RFC
// 2782); an address two records give is the first's.
func lookupSRV(ctx context.Context, c *dnsmsg.Client, a Addr) ([]found, uint32, error) {
	res, err := c.Lookup(ctx, a.Address, dnsmsg.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	recs := slices.Clone(res.Records)
	slices.SortStableFunc(recs, func(x, y dnsmsg.Record) int { return int(x.Priority) - int(y.Priority) })
	weights := srvWeights(recs)
	network := "tcp"
	if a.Network == srvUDP {
		network = "udp"
	}
	ttl := res.TTL
	var out []found
	seen := map[Addr]bool{}
	for i, r := range recs {
		if r.Target == "" {
			continue
		}
		rs, t := res.Msg.AdditionalAddrs(r.Target)
		ips := make([]netip.Addr, 0, len(rs))
		for _, x := range rs {
			ips = append(ips, x.Addr)
		}
		if len(rs) == 0 {
			as, err := c.LookupAddrs(ctx, r.Target, "ip")
			if err != nil {
				return nil, 0, err
			}
			ips, t = as.IPs, as.TTL
		}
		ttl = min(ttl, t)
		for _, ap := range sortAddrs(ips, r.Port, MaxTargets) {
			ba := Addr{Network: network, Address: ap.String()}
			if !seen[ba] && len(out) < MaxTargets {
				seen[ba] = true
				out = append(out, found{addr: ba, weight: weights[i], prio: r.Priority})
			}
		}
	}
	return out, ttl, nil
}

// srvWeights maps SRV weights (0 to 65535, sharing among the records of
// one priority) to target weights (1 to MaxWeight): the heaviest record
// of a priority gets MaxWeight and the others their share of it,
// rounded, at least 1, so that a record of weight 0 beside heavier ones
// keeps the very small chance RFC 2782 gives it; a priority whose
// records all weigh 0 shares evenly. recs is sorted by priority.
func srvWeights(recs []dnsmsg.Record) []int {
	out := make([]int, len(recs))
	for i := 0; i < len(recs); {
		j, most := i, 0
		for ; j < len(recs) && recs[j].Priority == recs[i].Priority; j++ {
			most = max(most, int(recs[j].Weight))
		}
		for k := i; k < j; k++ {
			out[k] = 1
			if most > 0 {
				out[k] = max(1, (int(recs[k].Weight)*MaxWeight+most/2)/most)
			}
		}
		i = j
	}
	return out
}
