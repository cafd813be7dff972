package dnsmsg

import (
	"context"
	"net/netip"
)

// Addrs is a name's addresses and how long they may be kept.
type Addrs struct {
	IPs []netip.Addr
	TTL uint32
}

// LookupAddrs asks for the addresses of name in the family network
// names ("ip4": A, "ip6": AAAA, else both), the A answer's first. An
// answer in one family is enough when the other's query fails; the TTL
// is the smallest of the answers'. A name with no address is no error:
// IPs is empty, and TTL the negative answers'.
func (c *Client) LookupAddrs(ctx context.Context, name, network string) (Addrs, error) {
	var qtypes []uint16
	switch network {
	case "ip4":
		qtypes = []uint16{TypeA}
	case "ip6":
		qtypes = []uint16{TypeAAAA}
	default:
		qtypes = []uint16{TypeA, TypeAAAA}
	}
	var out Addrs
	var lastErr error
	answered := false
	for _, qt := range qtypes {
		r, err := c.Lookup(ctx, name, qt)
		if err != nil {
			lastErr = err
			continue
		}
		if !answered || r.TTL < out.TTL {
			out.TTL = r.TTL
		}
		answered = true
		for _, rec := range r.Records {
			out.IPs = append(out.IPs, rec.Addr)
		}
	}
	if !answered || lastErr != nil && len(out.IPs) == 0 {
		return Addrs{}, lastErr
	}
	return out, nil
}
