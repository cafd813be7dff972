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
// returns an error naming those that did not answer. A target discovered
// from DNS (srv+tcp, srv+udp, resolve: all) is looked up as the relay
// would (cfg's resolver), and each backend it gives is checked. The
// relay itself never does this before it starts: it serves with the
// targets that are up and marks the others down.
func checkTargets(cfg relay.Config, w io.Writer) error {
	var errs []error
	for _, r := range cfg.Routes {
		timeout := r.DialTimeout
		if timeout <= 0 || timeout == relay.Never {
			timeout = relay.DefaultDialTimeout
		}
		name := r.Name
		if name == "" {
			name = r.Listen.String()
		}
		fail := func(t string, err error) {
			fmt.Fprintf(w, "target %s: DOWN: %v\n", t, err)
			errs = append(errs, fmt.Errorf("route %q: target %s: %v", name, t, err))
		}
		for _, tg := range r.Targets {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			as, err := relay.Discover(ctx, cfg, tg)
			cancel()
			switch {
			case err != nil:
				fail(tg.Addr.String(), err)
				continue
			case len(as) == 0:
				fail(tg.Addr.String(), errors.New("DNS gives no backend"))
				continue
			case len(as) > 1 || as[0] != tg.Addr:
				fmt.Fprintf(w, "target %s: %d backends\n", tg.Addr, len(as))
			}
			for _, t := range as {
				if err := checkOne(t, timeout, w); err != nil {
					fail(t.String(), err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkOne resolves a UDP target's host, or dials a stream target, and
// prints the line of a target that answers.
func checkOne(t relay.Addr, timeout time.Duration, w io.Writer) error {
	if t.Datagram() {
		host, _, _ := net.SplitHostPort(t.Address)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return err
		}
		fmt.Fprintf(w, "target %s: resolves\n", t)
		return nil
	}
	start := time.Now()
	c, err := net.DialTimeout(t.Network, t.Address, timeout)
	if err != nil {
		return err
	}
	c.Close()
	fmt.Fprintf(w, "target %s: up (%v)\n", t, time.Since(start).Round(time.Microsecond))
	return nil
}
