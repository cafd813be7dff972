package relay

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestMisfits: each setting a kind of route does not take is named by
// its key, and New refuses the route that gives it; a route giving only
// what its kind takes has none.
func TestMisfits(t *testing.T) {
	tcp := Route{Listen: Addr{"tcp", "127.0.0.1:7000"}, Target: Addr{"tcp", "127.0.0.1:7001"}}
	udp := Route{Listen: Addr{"udp", "127.0.0.1:7000"}, Target: Addr{"udp", "127.0.0.1:7001"}}
	unix := Route{Listen: Addr{"unix", "/run/zeroio-misfit.sock"}, Target: Addr{"tcp", "127.0.0.1:7001"}}
	abstract := Route{Listen: Addr{"unix", "@zeroio-misfit"}, Target: Addr{"tcp", "127.0.0.1:7001"}}
	cidr := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		key   string
		route Route
		set   func(*Route)
	}{
		{"max_conns", udp, func(r *Route) { r.MaxConns = 1 }},
		{"max_conns_per_client", udp, func(r *Route) { r.MaxConnsPerClient = 1 }},
		{"dial_timeout", udp, func(r *Route) { r.DialTimeout = time.Second }},
		{"idle_timeout", udp, func(r *Route) { r.IdleTimeout = Never }},
		{"keepalive", udp, func(r *Route) { r.KeepAlive = time.Second }},
		{"nagle", udp, func(r *Route) { r.Nagle = true }},
		{"proxy_header_timeout", udp, func(r *Route) { r.ProxyHeaderTimeout = time.Second }},
		{"peek_timeout", udp, func(r *Route) { r.PeekTimeout = time.Second }},
		{"health_check", udp, func(r *Route) { r.HealthCheck.Interval = time.Second }},
		{"health_check", udp, func(r *Route) { r.HealthCheck.Rise = 2 }},
		{"send_proxy", udp, func(r *Route) { r.SendProxy = 1 }},
		{"session_timeout", tcp, func(r *Route) { r.SessionTimeout = time.Second }},
		{"max_sessions", unix, func(r *Route) { r.MaxSessions = 1 }},
		{"udp_buffer", tcp, func(r *Route) { r.UDPBuffer = 1 << 20 }},
		{"quic_lb", tcp, func(r *Route) { r.QUICLB = &QUICLB{} }},
		{"workers", unix, func(r *Route) { r.Workers = 2 }},
		{"unix_mode", tcp, func(r *Route) { r.UnixMode = 0o660 }},
		{"unix_user", abstract, func(r *Route) { r.UnixUser = "0" }},
		{"unix_group", udp, func(r *Route) { r.UnixGroup = "0" }},
	} {
		r := tc.route
		tc.set(&r)
		if got := r.Misfits(); !slices.Equal(got, []string{tc.key}) {
			t.Errorf("%s on %s: misfits %q, want just it", tc.key, r.Listen, got)
		}
		if _, err := New(Config{Routes: []Route{r}}); err == nil {
			t.Errorf("%s on %s: New accepted it", tc.key, r.Listen)
		}
	}
	fits := []Route{tcp, udp, unix, abstract}
	fits[0].MaxConns, fits[0].Workers, fits[0].HealthCheck.Interval, fits[0].SendProxy = 5, 2, time.Second, 1
	fits[1].MaxSessions, fits[1].Workers, fits[1].UDPBuffer = 5, 2, 1<<20
	fits[1].SendProxy, fits[1].AcceptProxy, fits[1].TrustedProxies = 2, true, cidr
	fits[2].UnixMode, fits[2].IdleTimeout, fits[2].Workers = 0o660, time.Second, 1
	fits[3].AcceptProxy, fits[3].TrustedProxies = true, cidr
	for _, r := range fits {
		if got := r.Misfits(); len(got) > 0 {
			t.Errorf("%s: misfits %q, want none", r.Listen, got)
		}
	}
	if got := (Route{MaxConns: 1, SessionTimeout: 1}).Misfits(); got != nil {
		t.Errorf("no listen address: misfits %q, want none (validate reports it)", got)
	}
}
