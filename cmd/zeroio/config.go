package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/zeroio/zeroio/relay"
)

// routeSpec is one route as written in a config file or on the command
// line; the file's defaults section uses the same fields.
type routeSpec struct {
	Name               string       `yaml:"name"`
	Listen             string       `yaml:"listen"`
	Target             string       `yaml:"target"`
	Targets            []targetSpec `yaml:"targets"`
	Balance            string       `yaml:"balance"`
	HealthCheck        *healthSpec  `yaml:"health_check"`
	SNI                []string     `yaml:"sni"`
	ALPN               []string     `yaml:"alpn"`
	PeekTimeout        duration     `yaml:"peek_timeout"`
	ListenOverlap      bool         `yaml:"listen_overlap"`
	Workers            int          `yaml:"workers"`
	DialTimeout        duration     `yaml:"dial_timeout"`
	IdleTimeout        duration     `yaml:"idle_timeout"`
	MaxConns           int          `yaml:"max_conns"`
	MaxConnsPerClient  int          `yaml:"max_conns_per_client"`
	Allow              []string     `yaml:"allow"`
	Deny               []string     `yaml:"deny"`
	SendProxy          string       `yaml:"send_proxy"`
	AcceptProxy        bool         `yaml:"accept_proxy"`
	TrustedProxies     []string     `yaml:"trusted_proxies"`
	ProxyHeaderTimeout duration     `yaml:"proxy_header_timeout"`
	KeepAlive          duration     `yaml:"keepalive"`
	Nagle              bool         `yaml:"nagle"`
	SessionTimeout     duration     `yaml:"session_timeout"`
	MaxSessions        int          `yaml:"max_sessions"`
	UDPBuffer          int          `yaml:"udp_buffer"`
	UnixMode           string       `yaml:"unix_mode"`
	UnixUser           string       `yaml:"unix_user"`
	UnixGroup          string       `yaml:"unix_group"`

	// ownUnix is set when a unix_mode, unix_user or unix_group was given
	// for this route itself (in the route, or as flags with LISTEN
	// TARGET), not inherited from defaults: only then is it an error on a
	// route that does not listen on a Unix socket path.
	ownUnix bool
}

// targetSpec is one entry of a route's targets: a URL, or a mapping
// with the URL and a weight.
type targetSpec struct {
	URL    string `yaml:"url"`
	Weight *int   `yaml:"weight"`
}

func (t *targetSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		t.URL = n.Value
		return nil
	}
	type plain targetSpec
	var p plain
	if err := decodeStrict(n, &p); err != nil {
		return err
	}
	*t = targetSpec(p)
	return nil
}

// healthSpec is a route's health_check.
type healthSpec struct {
	Interval duration `yaml:"interval"`
	Timeout  duration `yaml:"timeout"`
	Rise     int      `yaml:"rise"`
	Fall     int      `yaml:"fall"`
}

// fileConfig is the config file's top level.
type fileConfig struct {
	MaxConns        int           `yaml:"max_conns"`
	Engine          string        `yaml:"engine"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	LogFormat       string        `yaml:"log_format"`
	ConnLog         string        `yaml:"conn_log"`
	Metrics         string        `yaml:"metrics"`
	Defaults        yaml.Node     `yaml:"defaults"`
	Routes          []yaml.Node   `yaml:"routes"`
}

// options are the settings outside relay.Config.
type options struct {
	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string
	connLog         string
	metrics         string
}

// loadFile reads a config file. Route fields not set in a route come from
// the file's defaults section, then from base (the command-line flags).
func loadFile(path string, base routeSpec) (relay.Config, fileConfig, error) {
	var fc fileConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return relay.Config{}, fc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		if err == io.EOF {
			return relay.Config{}, fc, fmt.Errorf("%s: empty config file", path)
		}
		return relay.Config{}, fc, fmt.Errorf("%s: %s", path, oneLine(err))
	}
	// A later document, unless it is empty (a trailing ---), would be
	// ignored by a single Decode: refuse it.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if err == io.EOF {
			break
		}
		if err == nil && emptyDoc(&more) {
			continue
		}
		return relay.Config{}, fc, fmt.Errorf("%s: more than one YAML document (a second --- line); put every route in one", path)
	}
	if fc.ShutdownTimeout < 0 {
		return relay.Config{}, fc, fmt.Errorf("%s: shutdown_timeout %v is negative", path, fc.ShutdownTimeout)
	}
	defaults := base.own()
	if !fc.Defaults.IsZero() {
		if err := decodeStrict(&fc.Defaults, &defaults); err != nil {
			return relay.Config{}, fc, fmt.Errorf("%s: defaults: %s", path, oneLine(err))
		}
	}
	if len(fc.Routes) == 0 {
		return relay.Config{}, fc, fmt.Errorf("%s: no routes (add a routes: list with listen and target)", path)
	}
	cfg := relay.Config{MaxConns: fc.MaxConns}
	var errs []error
	for i := range fc.Routes {
		spec := defaults.own()
		spec.UnixMode, spec.UnixUser, spec.UnixGroup = "", "", ""
		// A route's own target or targets replaces both defaults.
		if hasKey(&fc.Routes[i], "target") || hasKey(&fc.Routes[i], "targets") {
			spec.Target, spec.Targets = "", nil
		}
		if err := decodeStrict(&fc.Routes[i], &spec); err != nil {
			errs = append(errs, fmt.Errorf("%s: route %d: %s", path, i+1, oneLine(err)))
			continue
		}
		spec.ownUnix = spec.setsUnix()
		for _, f := range []struct{ own, def *string }{
			{&spec.UnixMode, &defaults.UnixMode}, {&spec.UnixUser, &defaults.UnixUser}, {&spec.UnixGroup, &defaults.UnixGroup},
		} {
			if *f.own == "" {
				*f.own = *f.def
			}
		}
		r, err := spec.route()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: line %d: %w", path, fc.Routes[i].Line, err))
			continue
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	return cfg, fc, errors.Join(errs...)
}

// decodeStrict decodes n into v, refusing unknown fields. yaml.v3's
// Node.Decode has no KnownFields switch, so the node is re-encoded and
// decoded by a strict Decoder.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// oneLine folds yaml's multi-line error lists into one line.
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n  ", "")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// route maps a spec onto a relay.Route: it parses what is written as
// text (addresses, CIDRs, modes, names) and leaves every check of values
// to relay.Route's validation, the same for flags and files.
func (s routeSpec) route() (relay.Route, error) {
	name := s.Name
	if name == "" {
		name = s.Listen
	}
	fail := func(format string, args ...any) (relay.Route, error) {
		return relay.Route{}, fmt.Errorf("route %q: "+format, append([]any{name}, args...)...)
	}
	if s.Listen == "" || (s.Target == "" && len(s.Targets) == 0) {
		return fail("needs a listen address and a target (target: URL, or targets: a list)")
	}
	if s.Target != "" && len(s.Targets) > 0 {
		return fail("give target or targets, not both")
	}
	listen, err := relay.ParseAddr(s.Listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	r := relay.Route{
		Name: s.Name, Listen: listen, Workers: s.Workers, Balance: relay.Balance(s.Balance),
		DialTimeout: time.Duration(s.DialTimeout), IdleTimeout: time.Duration(s.IdleTimeout),
		MaxConns: s.MaxConns, MaxConnsPerClient: s.MaxConnsPerClient,
		AcceptProxy: s.AcceptProxy, ProxyHeaderTimeout: time.Duration(s.ProxyHeaderTimeout),
		KeepAlive: time.Duration(s.KeepAlive), Nagle: s.Nagle,
		SessionTimeout: time.Duration(s.SessionTimeout), MaxSessions: s.MaxSessions, UDPBuffer: s.UDPBuffer,
		SNI: s.SNI, ALPN: s.ALPN, PeekTimeout: time.Duration(s.PeekTimeout), ListenOverlap: s.ListenOverlap,
	}
	if s.Target != "" {
		s.Targets = []targetSpec{{URL: s.Target}}
	}
	for _, t := range s.Targets {
		a, err := relay.ParseAddr(t.URL)
		if err != nil {
			return fail("target: %v", err)
		}
		w := 1
		if t.Weight != nil {
			w = *t.Weight
		}
		r.Targets = append(r.Targets, relay.Target{Addr: a, Weight: w})
	}
	if h := s.HealthCheck; h != nil {
		r.HealthCheck = relay.HealthCheck{Interval: time.Duration(h.Interval), Timeout: time.Duration(h.Timeout), Rise: h.Rise, Fall: h.Fall}
	}
	for _, l := range []struct {
		what string
		in   []string
		out  *[]netip.Prefix
	}{{"allow", s.Allow, &r.Allow}, {"deny", s.Deny, &r.Deny}, {"trusted_proxies", s.TrustedProxies, &r.TrustedProxies}} {
		for _, c := range l.in {
			p, err := parseCIDR(c)
			if err != nil {
				return fail("%s: %v", l.what, err)
			}
			*l.out = append(*l.out, p)
		}
	}
	if s.ownUnix || listen.Network == "unix" && !strings.HasPrefix(listen.Address, "@") {
		if s.UnixMode != "" {
			m, err := parseMode(s.UnixMode)
			if err != nil {
				return fail("unix_mode: %v", err)
			}
			r.UnixMode = m
		}
		r.UnixUser, r.UnixGroup = s.UnixUser, s.UnixGroup
	}
	switch strings.ToLower(s.SendProxy) {
	case "", "none", "off":
	case "v1", "1":
		r.SendProxy = 1
	case "v2", "2":
		r.SendProxy = 2
	default:
		return fail("send_proxy %q: want v1 or v2", s.SendProxy)
	}
	return r, nil
}

// own returns a copy of s whose health_check is its own: decoding a
// route's (or the defaults') health_check into the copy merges it over
// s's fields without changing s, which later routes, and the next
// reload, read as their defaults.
func (s routeSpec) own() routeSpec {
	if s.HealthCheck != nil {
		h := *s.HealthCheck
		s.HealthCheck = &h
	}
	return s
}

// hasKey reports whether the mapping node n has key.
func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// setsUnix reports whether s gives a Unix socket file's mode, owner or
// group.
func (s routeSpec) setsUnix() bool {
	return s.UnixMode != "" || s.UnixUser != "" || s.UnixGroup != ""
}

// parseMode reads a file mode in octal, as chmod(1) takes it: 660, 0660 or
// 0o660.
func parseMode(s string) (os.FileMode, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O"), 8, 32)
	if err != nil || v == 0 || v > 0o777 {
		return 0, fmt.Errorf("%q is not a file mode: want octal permission bits such as 0660", s)
	}
	return os.FileMode(v), nil
}

// parseCIDR accepts a CIDR or a bare address (a /32 or /128).
func parseCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p != p.Masked() {
			return p, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8, 2001:db8::/32) or an address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// emptyDoc reports whether n is a YAML document with nothing in it.
func emptyDoc(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && len(n.Content) == 0 ||
		n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
