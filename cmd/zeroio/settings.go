package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/zeroio/zeroio/relay"
)

// routeSettings is the one list of a route's settings: each one's YAML
// key, the flags that set it, and how its value maps onto relay.Route.
// The route flags, the decoding of a route (or the defaults) in the
// config file and the mapping onto relay.Route all come from it. Which
// settings a kind of route takes, their defaults and every check of
// their values are relay.Route's: a default that a route does not take
// (relay.Route.Misfits) is left out, and a setting written in the route
// itself is refused by relay.New. The PROXY protocol settings reach a UDP
// route only written in it (perUDPRoute).
var routeSettings = []setting{
	opt("name", func(v string, r *relay.Route) error { r.Name = v; return nil }),
	opt("listen", func(v string, r *relay.Route) error { return parseAddr(&r.Listen, "listen", v) }),
	opt("target", func(v string, r *relay.Route) error {
		return applyTargets([]targetSpec{{URL: v}}, r)
	}),
	opt("targets", applyTargets),
	opt("resolve", applyResolve,
		stringFlag("resolve", "all: a target given by host name stands for each of its addresses, a backend each, looked up again as their TTL runs out (per target in a file: resolve: all)")),
	opt("balance", func(v string, r *relay.Route) error { r.Balance = relay.Balance(v); return nil },
		stringFlag("balance", "the `policy` that spreads new clients over a route's targets: round-robin (weighted; the default), least-conn or client-hash")),
	opt("health_check", applyHealth,
		healthFlag("health-interval", "connect to each target this often to check it (a `duration`; by default no active checks: a failed dial marks a target down)",
			func(h *healthSpec, s string) error { return h.Interval.Set(s) }),
		healthFlag("health-timeout", "time allowed for a health check's connect (a `duration`; default the smaller of the interval and --dial-timeout)",
			func(h *healthSpec, s string) error { return h.Timeout.Set(s) }),
		healthFlag("health-rise", "`N` passed checks in a row bring a target back up (default 2)",
			func(h *healthSpec, s string) error { return setInteger(&h.Rise, s) }),
		healthFlag("health-fall", "`N` failed checks in a row mark a target down (default 3)",
			func(h *healthSpec, s string) error { return setInteger(&h.Fall, s) })),
	opt("sni", func(v []string, r *relay.Route) error { r.SNI = v; return nil },
		listFlag("sni", "with LISTEN TARGET: take only TLS clients (QUIC on UDP) whose ClientHello names this server (`name` or *.wildcard; repeat or comma-separate); others are closed or dropped")),
	opt("alpn", func(v []string, r *relay.Route) error { r.ALPN = v; return nil },
		listFlag("alpn", "with LISTEN TARGET: take only TLS clients (QUIC on UDP) offering this ALPN `protocol` (repeat or comma-separate)")),
	opt("peek_timeout", durationTo(func(r *relay.Route) *time.Duration { return &r.PeekTimeout }),
		durationFlag("peek-timeout", fmt.Sprintf("time allowed for a client's TLS ClientHello on a route chosen by SNI or ALPN (`duration`, default %v)", relay.DefaultPeekTimeout))),
	opt("listen_overlap", func(v bool, r *relay.Route) error { r.ListenOverlap = v; return nil }),
	opt("workers", intTo(func(r *relay.Route) *int { return &r.Workers }),
		intFlag("workers", "`N` sockets per TCP or UDP route in one SO_REUSEPORT group, sharing accept or reads (Linux; default 1)")),
	opt("dial_timeout", durationTo(func(r *relay.Route) *time.Duration { return &r.DialTimeout }),
		durationFlag("dial-timeout", fmt.Sprintf("time allowed to connect to a target, over all the targets a client tries: a `duration`, or never (default %v)", relay.DefaultDialTimeout))),
	opt("idle_timeout", durationTo(func(r *relay.Route) *time.Duration { return &r.IdleTimeout }),
		durationFlag("idle-timeout", fmt.Sprintf("close a stream after this long with no byte moving either way: a `duration`, or never (default %v)", relay.DefaultIdleTimeout))),
	opt("max_conns", intTo(func(r *relay.Route) *int { return &r.MaxConns }),
		intFlag("max-conns-route", "limit of concurrent streams per route (`N`; 0: none)")),
	opt("max_conns_per_client", intTo(func(r *relay.Route) *int { return &r.MaxConnsPerClient }),
		intFlag("max-conns-per-client", "limit of concurrent streams per client IP (`N`; 0: none)")),
	opt("conn_rate_per_client", func(v string, r *relay.Route) error {
		rate, err := relay.ParseConnRate(v)
		r.ConnRatePerClient = rate
		return err
	}, stringFlag("conn-rate-per-client", "limit of new connections (UDP: sessions) per client IP: a `rate` such as 10/s or 600/m; over it a client is closed before any dial (default none)")),
	opt("upload_rate", byteRateTo(func(r *relay.Route) *relay.ByteRate { return &r.UploadRate }),
		stringFlag("upload-rate", "bytes per second client to target, per connection (UDP: per session): a `rate` such as 2MiB/s or 500KB/s (default none)")),
	opt("download_rate", byteRateTo(func(r *relay.Route) *relay.ByteRate { return &r.DownloadRate }),
		stringFlag("download-rate", "bytes per second target to client, per connection (UDP: per session): a `rate` such as 2MiB/s or 500KB/s (default none)")),
	opt("client_upload_rate", byteRateTo(func(r *relay.Route) *relay.ByteRate { return &r.ClientUploadRate }),
		stringFlag("client-upload-rate", "bytes per second client to target, shared by one client IP's streams: a `rate` such as 10MiB/s (default none)")),
	opt("client_download_rate", byteRateTo(func(r *relay.Route) *relay.ByteRate { return &r.ClientDownloadRate }),
		stringFlag("client-download-rate", "bytes per second target to client, shared by one client IP's streams: a `rate` such as 10MiB/s (default none)")),
	opt("max_duration", durationTo(func(r *relay.Route) *time.Duration { return &r.MaxDuration }),
		durationFlag("max-duration", "close a stream (UDP: end a session) this long after it was accepted, whatever its traffic: a `duration`, or never (the default)")),
	opt("allow", cidrsTo("allow", func(r *relay.Route) *[]netip.Prefix { return &r.Allow }),
		listFlag("allow", "admit only clients in this `CIDR` (repeat or comma-separate)")),
	opt("deny", cidrsTo("deny", func(r *relay.Route) *[]netip.Prefix { return &r.Deny }),
		listFlag("deny", "refuse clients in this `CIDR` (repeat or comma-separate; deny wins)")),
	perUDPRoute(opt("send_proxy", applySendProxy,
		stringFlag("send-proxy", "send a PROXY protocol header of this `version` (v1, v2) to the target"))),
	perUDPRoute(opt("accept_proxy", func(v bool, r *relay.Route) error { r.AcceptProxy = v; return nil },
		boolFlag("accept-proxy", "require a PROXY protocol header (v1 or v2) from each client"))),
	perUDPRoute(opt("trusted_proxies", cidrsTo("trusted_proxies", func(r *relay.Route) *[]netip.Prefix { return &r.TrustedProxies }),
		listFlag("trusted-proxy", "with --accept-proxy, admit only peers in this `CIDR` (an error without --accept-proxy)"))),
	opt("proxy_header_timeout", durationTo(func(r *relay.Route) *time.Duration { return &r.ProxyHeaderTimeout }),
		durationFlag("proxy-header-timeout", fmt.Sprintf("time allowed for a client's PROXY header (`duration`, default %v)", relay.DefaultProxyHeaderTimeout))),
	opt("keepalive", durationTo(func(r *relay.Route) *time.Duration { return &r.KeepAlive }),
		durationFlag("keepalive", "turn TCP keep-alive on for both sockets of each stream, probing after this long idle (a `duration`); off by default, as in HAProxy: no system call is spent on it")),
	opt("nagle", func(v bool, r *relay.Route) error { r.Nagle = v; return nil },
		boolFlag("nagle", "enable Nagle's algorithm (by default TCP_NODELAY is set)")),
	opt("session_timeout", durationTo(func(r *relay.Route) *time.Duration { return &r.SessionTimeout }),
		durationFlag("session-timeout", fmt.Sprintf("end a UDP session after this long without a datagram (`duration`, default %v)", relay.DefaultSessionTimeout))),
	opt("max_sessions", intTo(func(r *relay.Route) *int { return &r.MaxSessions }),
		intFlag("max-sessions", fmt.Sprintf("limit of concurrent UDP sessions per route (`N`, default %d)", relay.DefaultMaxSessions))),
	opt("quic_lb", applyQUICLB),
	opt("udp_buffer", intTo(func(r *relay.Route) *int { return &r.UDPBuffer }),
		intFlag("udp-buffer", fmt.Sprintf("receive and send buffer of a UDP route's sockets (listening and per session), in `bytes` (default %d)", relay.DefaultUDPBuffer))),
	opt("unix_mode", applyUnixMode,
		stringFlag("unix-mode", "permission bits of a Unix listen socket's file, in `octal` (0660: owner and group may connect)")),
	opt("unix_user", func(v string, r *relay.Route) error { r.UnixUser = v; return nil },
		stringFlag("unix-user", "owner of a Unix listen socket's file: a `user` name or uid (needs privilege)")),
	opt("unix_group", func(v string, r *relay.Route) error { r.UnixGroup = v; return nil },
		stringFlag("unix-group", "group of a Unix listen socket's file: a `group` name or gid")),
}

// setting is one route setting of routeSettings. Its values are of one
// type per setting (string, bool, integer, duration, []string,
// healthSpec, []targetSpec), held in a routeSpec by key.
type setting struct {
	key   string
	typ   reflect.Type // of its values
	flags []flagDef
	// decode reads the setting from the YAML node n over old, the value
	// it inherits (nil for none): a health_check merges into the
	// inherited one, field by field; anything else replaces it.
	decode func(n *yaml.Node, old any) (any, error)
	// udpOwn: a UDP route takes the setting only from its own key;
	// from the defaults or the flags it reaches stream routes alone.
	udpOwn bool
	// apply maps the value onto r: it parses what is text (addresses,
	// CIDRs, modes, versions) and leaves every check of values to
	// relay.Route's validation.
	apply func(v any, r *relay.Route) error
}

// flagDef is a flag that sets a setting: set parses the flag's text
// over old, the value before it (a list flag given twice appends).
type flagDef struct {
	name, usage string
	set         func(s string, old any) (any, error)
	isBool      bool
}

// opt makes the setting key of type T, set by flags and mapped onto a
// Route by apply.
func opt[T any](key string, apply func(T, *relay.Route) error, flags ...flagDef) setting {
	return setting{
		key:   key,
		typ:   reflect.TypeFor[T](),
		flags: flags,
		decode: func(n *yaml.Node, old any) (any, error) {
			v, _ := old.(T)
			err := n.Decode(&v)
			return v, err
		},
		apply: func(v any, r *relay.Route) error { return apply(v.(T), r) },
	}
}

// perUDPRoute marks st as one a UDP route takes only written in it: the
// PROXY protocol over UDP puts a header in every datagram, which a UDP
// service that does not expect it cannot read, so a default meant for
// the stream routes must not turn it on.
func perUDPRoute(st setting) setting {
	st.udpOwn = true
	return st
}

// lookupSetting returns the setting of a YAML key, or nil.
func lookupSetting(key string) *setting {
	for i := range routeSettings {
		if routeSettings[i].key == key {
			return &routeSettings[i]
		}
	}
	return nil
}

func durationTo(field func(*relay.Route) *time.Duration) func(duration, *relay.Route) error {
	return func(v duration, r *relay.Route) error { *field(r) = time.Duration(v); return nil }
}

func intTo(field func(*relay.Route) *int) func(integer, *relay.Route) error {
	return func(v integer, r *relay.Route) error { *field(r) = int(v); return nil }
}

// byteRateTo maps a byte rate ("2MiB/s") onto a field.
func byteRateTo(field func(*relay.Route) *relay.ByteRate) func(string, *relay.Route) error {
	return func(v string, r *relay.Route) error {
		rate, err := relay.ParseByteRate(v)
		*field(r) = rate
		return err
	}
}

// cidrsTo maps a list of CIDRs (or bare addresses) onto a field.
func cidrsTo(key string, field func(*relay.Route) *[]netip.Prefix) func([]string, *relay.Route) error {
	return func(v []string, r *relay.Route) error {
		for _, c := range v {
			p, err := parseCIDR(c)
			if err != nil {
				return fmt.Errorf("%s: %v", key, err)
			}
			*field(r) = append(*field(r), p)
		}
		return nil
	}
}

func parseAddr(dst *relay.Addr, key, s string) error {
	a, err := relay.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("%s: %v", key, err)
	}
	*dst = a
	return nil
}

func applyTargets(ts []targetSpec, r *relay.Route) error {
	for _, t := range ts {
		var a relay.Addr
		if err := parseAddr(&a, "target", t.URL); err != nil {
			return err
		}
		w := 1
		if t.Weight != nil {
			w = int(*t.Weight)
		}
		r.Targets = append(r.Targets, relay.Target{Addr: a, Weight: w, Resolve: relay.Resolve(t.Resolve)})
		if t.ServerID != "" {
			id, err := hex.DecodeString(t.ServerID)
			if err != nil || len(id) == 0 {
				return fmt.Errorf("target %s: server_id %q: want the server ID in hex", t.URL, t.ServerID)
			}
			if r.QUICLB == nil {
				r.QUICLB = &relay.QUICLB{}
			}
			r.QUICLB.Servers = append(r.QUICLB.Servers, relay.QUICServer{Target: a, ID: id})
		}
	}
	return nil
}

// applyResolve gives the route's targets that set none, but Unix
// paths, the route's resolve: the flag and the route's key are a default
// for its targets.
func applyResolve(v string, r *relay.Route) error {
	for i := range r.Targets {
		if t := &r.Targets[i]; t.Resolve == "" && t.Addr.Network != "unix" {
			t.Resolve = relay.Resolve(v)
		}
	}
	return nil
}

// applyQUICLB sets the layout of the route's QUIC-LB connection IDs,
// keeping the server IDs its targets gave.
func applyQUICLB(q quicLBSpec, r *relay.Route) error {
	if q.ConfigID < 0 || q.ConfigID > 255 {
		return fmt.Errorf("quic_lb: config_id %d: want 0 to 6", q.ConfigID)
	}
	if r.QUICLB == nil {
		r.QUICLB = &relay.QUICLB{}
	}
	r.QUICLB.ConfigID, r.QUICLB.ServerIDLen, r.QUICLB.NonceLen = uint8(q.ConfigID), int(q.ServerIDLen), int(q.NonceLen)
	return nil
}

func applyHealth(h healthSpec, r *relay.Route) error {
	r.HealthCheck = relay.HealthCheck{Interval: time.Duration(h.Interval), Timeout: time.Duration(h.Timeout), Rise: int(h.Rise), Fall: int(h.Fall)}
	return nil
}

func applySendProxy(v string, r *relay.Route) error {
	switch strings.ToLower(v) {
	case "", "none", "off":
		r.SendProxy = 0
	case "v1", "1":
		r.SendProxy = 1
	case "v2", "2":
		r.SendProxy = 2
	default:
		return fmt.Errorf("send_proxy %q: want v1 or v2", v)
	}
	return nil
}

func applyUnixMode(v string, r *relay.Route) error {
	if v == "" {
		return nil
	}
	m, err := parseMode(v)
	if err != nil {
		return fmt.Errorf("unix_mode: %v", err)
	}
	r.UnixMode = m
	return nil
}
