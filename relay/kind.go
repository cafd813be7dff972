package relay

import (
	"fmt"
	"strings"
)

// Misfits lists the settings r gives that its kind of listen address
// does not take, each by its configuration key (max_conns,
// session_timeout): on a UDP route the stream settings (connection
// limits, dial, idle, peek and PROXY header timeouts, keep-alive, Nagle,
// PROXY protocol v1, health checks); on a stream route
// the UDP settings (session timeout and limit, buffer, QUIC-LB); more
// than one worker on a Unix socket path; a Unix socket file's mode, user
// and group on any other listen address. [New] refuses a route that
// gives any of them. Misfits looks at r as given, before the defaults
// are filled in, and says nothing of r's other errors. A program that
// fills routes from shared defaults, as zeroio's config file does, can
// leave out the defaults a route does not take.
func (r Route) Misfits() []string {
	if r.Listen.Network == "" {
		return nil
	}
	keys := r.kindOnly()
	add := func(on bool, key string) {
		if on {
			keys = append(keys, key)
		}
	}
	// validate refuses these with messages of their own.
	if r.Listen.Datagram() {
		add(r.HealthCheck != (HealthCheck{}), "health_check")
		add(r.SendProxy == 1, "send_proxy") // v1 has no datagram form
	}
	path := r.Listen.Network == "unix" && !strings.HasPrefix(r.Listen.Address, "@")
	add(r.Listen.Network == "unix" && r.Workers > 1, "workers")
	add(!path && r.UnixMode != 0, "unix_mode")
	add(!path && r.UnixUser != "", "unix_user")
	add(!path && r.UnixGroup != "", "unix_group")
	return keys
}

// kindOnly lists the settings r gives that only the other kind of route
// takes: stream settings on a UDP route, UDP ones on a stream route.
func (r *Route) kindOnly() []string {
	var set []string
	add := func(on bool, key string) {
		if on {
			set = append(set, key)
		}
	}
	if r.Listen.Datagram() {
		add(r.MaxConns != 0, "max_conns")
		add(r.MaxConnsPerClient != 0, "max_conns_per_client")
		add(r.DialTimeout != 0, "dial_timeout")
		add(r.IdleTimeout != 0, "idle_timeout")
		add(r.KeepAlive != 0, "keepalive")
		add(r.Nagle, "nagle")
		add(r.ProxyHeaderTimeout != 0, "proxy_header_timeout")
		add(r.PeekTimeout != 0, "peek_timeout")
		add(r.ClientUploadRate != 0, "client_upload_rate")
		add(r.ClientDownloadRate != 0, "client_download_rate")
	} else {
		add(r.SessionTimeout != 0, "session_timeout")
		add(r.MaxSessions != 0, "max_sessions")
		add(r.UDPBuffer != 0, "udp_buffer")
		add(r.QUICLB != nil, "quic_lb")
	}
	return set
}

// checkKind refuses settings r gives that its kind of route ignores:
// stream settings on a UDP route, UDP ones on a stream route. It looks
// at r as given, before withDefaults fills in both kinds' defaults.
func (r *Route) checkKind() error {
	if r.Listen.Network == "" {
		return nil // validate reports it
	}
	set := r.kindOnly()
	if len(set) == 0 {
		return nil
	}
	name := r.Name
	if name == "" {
		name = r.Listen.String()
	}
	if r.Listen.Datagram() {
		return fmt.Errorf("route %q: %s: for stream (TCP or Unix) routes only (a UDP route has session_timeout, max_sessions and udp_buffer)", name, strings.Join(set, ", "))
	}
	return fmt.Errorf("route %q: %s: for UDP routes only (a stream route has idle_timeout, max_conns and max_conns_per_client)", name, strings.Join(set, ", "))
}
