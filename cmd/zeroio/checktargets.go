package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// checkTargets is --check-targets: it resolves every target host and
// dials every stream target once, printing one line per target, and
// returns an error naming those that did not answer. The relay itself
// never does this before it starts: it serves with the targets that are
// up and marks the others down.
func checkTargets(routes []relay.Route, w io.Writer) error {
	var errs []error
	for _, r := range routes {
		timeout := r.DialTimeout
		if timeout <= 0 || timeout == relay.Never {
			timeout = relay.DefaultDialTimeout
		}
		for _, tg := range r.Targets {
			t := tg.Addr
			var err error
			if t.Datagram() {
				host, _, _ := net.SplitHostPort(t.Address)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				_, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
				cancel()
			} else {
				var c net.Conn
				start := time.Now()
				if c, err = net.DialTimeout(t.Network, t.Address, timeout); err == nil {
					c.Close()
					fmt.Fprintf(w, "target %s: up (%v)\n", t, time.Since(start).Round(time.Microsecond))
					continue
				}
			}
			if err != nil {
				fmt.Fprintf(w, "target %s: DOWN: %v\n", t, err)
				name := r.Name
				if name == "" {
					name = r.Listen.String()
				}
				errs = append(errs, fmt.Errorf("route %q: target %s: %v", name, t, err))
				continue
			}
			fmt.Fprintf(w, "target %s: resolves\n", t)
		}
	}
	return errors.Join(errs...)
}
