package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"slices"
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
	Workers            integer      `yaml:"workers"`
	DialTimeout        duration     `yaml:"dial_timeout"`
	IdleTimeout        duration     `yaml:"idle_timeout"`
	MaxConns           integer      `yaml:"max_conns"`
	MaxConnsPerClient  integer      `yaml:"max_conns_per_client"`
	Allow              []string     `yaml:"allow"`
	Deny               []string     `yaml:"deny"`
	SendProxy          string       `yaml:"send_proxy"`
	AcceptProxy        bool         `yaml:"accept_proxy"`
	TrustedProxies     []string     `yaml:"trusted_proxies"`
	ProxyHeaderTimeout duration     `yaml:"proxy_header_timeout"`
	KeepAlive          duration     `yaml:"keepalive"`
	Nagle              bool         `yaml:"nagle"`
	SessionTimeout     duration     `yaml:"session_timeout"`
	MaxSessions        integer      `yaml:"max_sessions"`
	UDPBuffer          integer      `yaml:"udp_buffer"`
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
	URL    string   `yaml:"url"`
	Weight *integer `yaml:"weight"`
}

func (t *targetSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		t.URL = n.Value
		return nil
	}
	// Node.Decode is not strict (it has no KnownFields switch), so the
	// keys are checked here, at the line they are on.
	if err := checkKeys(n, "url", "weight"); err != nil {
		return err
	}
	type plain targetSpec
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*t = targetSpec(p)
	return nil
}

// checkKeys refuses a key of the mapping n (or of a mapping merged into
// it with <<) that is not one of known, as a *yaml.TypeError.
func checkKeys(n *yaml.Node, known ...string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Value == "<<" && k.Tag == "!!merge" {
			for _, m := range merged(n.Content[i+1]) {
				if err := checkKeys(m, known...); err != nil {
					return err
				}
			}
			continue
		}
		if !slices.Contains(known, k.Value) {
			// A TypeError lets yaml go on and report every error
			// in the file, not this one alone.
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: unknown key %s (want %s)", k.Line, k.Value, strings.Join(known, " or "))}}
		}
	}
	return nil
}

// merged returns the mappings that the value v of a << key merges: a
// mapping, an alias of one, or a sequence of those.
func merged(v *yaml.Node) []*yaml.Node {
	for v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			out = append(out, merged(e)...)
		}
		return out
	}
	return nil
}

// integer is an int of the config file. yaml would decode a number with
// a fraction into an int by truncating it: weight: 0.5 became 0, a target
// that takes no new clients, and max_conns_per_client: 0.9 no limit at
// all. A fraction, or a number too large for an int, is an error.
type integer int

func (i *integer) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" {
		what := "is not a whole number"
		if f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err == nil && f == math.Trunc(f) {
			what = "is out of range"
			if math.Abs(f) <= 1<<53 { // exact in a float64, and fits an int64
				what = fmt.Sprintf("is not written as an integer (%d)", int64(f))
			}
		}
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s %s", n.Line, n.Value, what)}}
	}
	var v int
	if err := n.Decode(&v); err != nil {
		return err
	}
	*i = integer(v)
	return nil
}

// healthSpec is a route's health_check.
type healthSpec struct {
	Interval duration `yaml:"interval"`
	Timeout  duration `yaml:"timeout"`
	Rise     integer  `yaml:"rise"`
	Fall     integer  `yaml:"fall"`
}

// fileConfig is the config file's top level. Its defaults and routes are
// kept as YAML nodes, each route to be decoded over the defaults.
type fileConfig = fileOf[yaml.Node]

// fileOf is the config file's top level with route fields of type R:
// fileOf[routeSpec] is the whole file decoded strictly, which loadFile
// does first so that an unknown key or a wrong type anywhere is reported
// at its line in the file, and aliases (*name) of anchors (&name) set
// elsewhere in the file resolve.
type fileOf[R any] struct {
	MaxConns        integer       `yaml:"max_conns"`
	Engine          string        `yaml:"engine"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	LogFormat       string        `yaml:"log_format"`
	ConnLog         string        `yaml:"conn_log"`
	Metrics         string        `yaml:"metrics"`
	Defaults        R             `yaml:"defaults"`
	Routes          []R           `yaml:"routes"`
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
	// The defaults and routes are decoded below node by node, which
	// yaml cannot do strictly: check the whole file strictly first.
	var strict fileOf[routeSpec]
	sdec := yaml.NewDecoder(bytes.NewReader(data))
	sdec.KnownFields(true)
	if err := sdec.Decode(&strict); err != nil {
		return relay.Config{}, fc, fmt.Errorf("%s: %s", path, oneLine(err))
	}
	if fc.ShutdownTimeout < 0 {
		return relay.Config{}, fc, fmt.Errorf("%s: shutdown_timeout %v is negative", path, fc.ShutdownTimeout)
	}
	defaults := base.own()
	if !fc.Defaults.IsZero() {
		if err := fc.Defaults.Decode(&defaults); err != nil {
			return relay.Config{}, fc, fmt.Errorf("%s: defaults: %s", path, oneLine(err))
		}
	}
	if len(fc.Routes) == 0 {
		return relay.Config{}, fc, fmt.Errorf("%s: no routes (add a routes: list with listen and target)", path)
	}
	cfg := relay.Config{MaxConns: int(fc.MaxConns)}
	var errs []error
	unnamed := map[string]int{} // listen address -> line of its unnamed route
	for i := range fc.Routes {
		spec := defaults.own()
		spec.UnixMode, spec.UnixUser, spec.UnixGroup = "", "", ""
		// A route's own target or targets replaces both defaults.
		if hasKey(&fc.Routes[i], "target") || hasKey(&fc.Routes[i], "targets") {
			spec.Target, spec.Targets = "", nil
		}
		if err := fc.Routes[i].Decode(&spec); err != nil {
			errs = append(errs, fmt.Errorf("%s: route %d: %s", path, i+1, oneLine(err)))
			continue
		}
		spec.ownUnix = spec.setsUnix()
		spec.dropInapplicable(func(key string) bool { return hasKey(&fc.Routes[i], key) })
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
		// A route without a name is named by its listen address, so
		// two on one address (told apart by sni) would be refused as
		// `route "tcp://...": name used twice`, naming nothing the
		// file says: say what is missing, and where.
		if r.Name == "" {
			k := r.Listen.String()
			if first, ok := unnamed[k]; ok {
				errs = append(errs, fmt.Errorf("%s: line %d: the routes at lines %d and %d both listen on %s: give each a name", path, fc.Routes[i].Line, first, fc.Routes[i].Line, k))
				continue
			}
			unnamed[k] = fc.Routes[i].Line
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	return cfg, fc, errors.Join(errs...)
}

// oneLine folds yaml's multi-line error lists into one line, and names
// an unknown key as such rather than by the Go type that lacks it.
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n  ", "")
	s = unknownField.ReplaceAllString(s, "unknown key $1")
	s = intoType.ReplaceAllStringFunc(s, func(m string) string {
		sep := strings.TrimRight(m, ";\n")
		sep = m[len(sep):] // the separator the match took, kept
		for _, t := range goTypes {
			if strings.HasPrefix(m[len(" into "):], t.prefix) {
				return ": want " + t.want + sep
			}
		}
		return m
	})
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

var (
	unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)
	// intoType is the Go type at the end of yaml's "cannot unmarshal
	// !!seq into main.routeSpec", which goTypes says in the file's terms.
	intoType = regexp.MustCompile(` into \S+$| into \S+(;|\n)`)
	goTypes  = []struct{ prefix, want string }{
		{"main.fileOf[", "a mapping of settings and routes"},
		{"main.routeSpec", "a mapping of route settings"},
		{"main.healthSpec", "a mapping (interval, timeout, rise, fall)"},
		{"main.plain", "a URL or a mapping (url, weight)"},
		{"[]main.targetSpec", "a list of targets"},
		{"[]yaml.Node", "a list of routes"},
		{"[]string", "a list"},
		{"time.Duration", "a duration (30s, 1m)"},
		{"int", "an integer"},
		{"bool", "true or false"},
	}
)

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
		Name: s.Name, Listen: listen, Workers: int(s.Workers), Balance: relay.Balance(s.Balance),
		DialTimeout: time.Duration(s.DialTimeout), IdleTimeout: time.Duration(s.IdleTimeout),
		MaxConns: int(s.MaxConns), MaxConnsPerClient: int(s.MaxConnsPerClient),
		AcceptProxy: s.AcceptProxy, ProxyHeaderTimeout: time.Duration(s.ProxyHeaderTimeout),
		KeepAlive: time.Duration(s.KeepAlive), Nagle: s.Nagle,
		SessionTimeout: time.Duration(s.SessionTimeout), MaxSessions: int(s.MaxSessions), UDPBuffer: int(s.UDPBuffer),
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
			w = int(*t.Weight)
		}
		r.Targets = append(r.Targets, relay.Target{Addr: a, Weight: w})
	}
	if h := s.HealthCheck; h != nil {
		r.HealthCheck = relay.HealthCheck{Interval: time.Duration(h.Interval), Timeout: time.Duration(h.Timeout), Rise: int(h.Rise), Fall: int(h.Fall)}
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

// dropInapplicable clears the settings s inherited (from the file's
// defaults or the flags) that cannot apply to its kind of listen address:
// health checks, the PROXY protocol and the stream settings (connection
// limits, dial and idle timeouts, keep-alive, Nagle, peek timeout) on a
// UDP route, the UDP settings (session timeout and limit, buffer) on a
// stream route, several workers on a Unix socket. A default is meant for
// the routes it fits, as unix_mode is; without this, --health-interval or
// a defaults' send_proxy made every UDP route in the file an error.
// Written in the route itself (own reports the route's keys), such a
// setting is still refused.
func (s *routeSpec) dropInapplicable(own func(key string) bool) {
	l, err := relay.ParseAddr(s.Listen)
	if err != nil {
		return // route reports it
	}
	drop := func(key string, clear func()) {
		if !own(key) {
			clear()
		}
	}
	if l.Datagram() {
		drop("health_check", func() { s.HealthCheck = nil })
		drop("send_proxy", func() { s.SendProxy = "" })
		drop("accept_proxy", func() { s.AcceptProxy = false })
		drop("trusted_proxies", func() { s.TrustedProxies = nil })
		drop("max_conns", func() { s.MaxConns = 0 })
		drop("max_conns_per_client", func() { s.MaxConnsPerClient = 0 })
		drop("dial_timeout", func() { s.DialTimeout = 0 })
		drop("idle_timeout", func() { s.IdleTimeout = 0 })
		drop("keepalive", func() { s.KeepAlive = 0 })
		drop("nagle", func() { s.Nagle = false })
		drop("proxy_header_timeout", func() { s.ProxyHeaderTimeout = 0 })
		drop("peek_timeout", func() { s.PeekTimeout = 0 })
	} else {
		drop("session_timeout", func() { s.SessionTimeout = 0 })
		drop("max_sessions", func() { s.MaxSessions = 0 })
		drop("udp_buffer", func() { s.UDPBuffer = 0 })
	}
	if l.Network == "unix" {
		drop("workers", func() { s.Workers = 0 })
	}
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

// hasKey reports whether the mapping node n, an alias of one, or a
// mapping merged into it with <<, has key.
func hasKey(n *yaml.Node, key string) bool {
	for _, m := range merged(n) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if k.Value == key || k.Value == "<<" && k.Tag == "!!merge" && hasKey(m.Content[i+1], key) {
				return true
			}
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
