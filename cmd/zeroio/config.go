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

// targetSpec is one entry of a route's targets: a URL, or a mapping
// with the URL, a weight, and how its host name resolves.
type targetSpec struct {
	URL      string   `yaml:"url"`
	Weight   *integer `yaml:"weight"`
	ServerID string   `yaml:"server_id"` // hex: the target's QUIC-LB server ID (see quic_lb)
	Resolve  string   `yaml:"resolve"`   // all: a backend per address of its host name
}

func (t *targetSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		t.URL = n.Value
		return nil
	}
	// Node.Decode is not strict (it has no KnownFields switch), so the
	// keys are checked here, at the line they are on.
	if err := checkKeys(n, "url", "weight", "server_id", "resolve"); err != nil {
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

// quicLBSpec is a UDP route's quic_lb: the layout of the QUIC-LB
// connection IDs its targets issue (each target's server_id is given
// with the target).
type quicLBSpec struct {
	ConfigID    integer `yaml:"config_id"`
	ServerIDLen integer `yaml:"server_id_len"`
	NonceLen    integer `yaml:"nonce_len"`
}

// quicLBFields names, in yaml's errors, the mapping a quic_lb should be.
type quicLBFields quicLBSpec

// UnmarshalYAML decodes a quic_lb, refusing unknown keys at their line.
func (q *quicLBSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		if err := checkKeys(n, "config_id", "server_id_len", "nonce_len"); err != nil {
			return err
		}
	}
	p := quicLBFields(*q)
	if err := n.Decode(&p); err != nil {
		return err
	}
	*q = quicLBSpec(p)
	return nil
}

// healthSpec is a route's health_check.
type healthSpec struct {
	Interval duration `yaml:"interval"`
	Timeout  duration `yaml:"timeout"`
	Rise     integer  `yaml:"rise"`
	Fall     integer  `yaml:"fall"`
}

// healthFields names, in yaml's errors, the mapping a health_check
// should be.
type healthFields healthSpec

// UnmarshalYAML decodes a health_check over h, field by field, refusing
// unknown keys at their line (Node.Decode is not strict).
func (h *healthSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		if err := checkKeys(n, "interval", "timeout", "rise", "fall"); err != nil {
			return err
		}
	}
	p := healthFields(*h)
	if err := n.Decode(&p); err != nil {
		return err
	}
	*h = healthSpec(p)
	return nil
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
	MaxConns         integer       `yaml:"max_conns"`
	Engine           string        `yaml:"engine"`
	ShutdownTimeout  time.Duration `yaml:"shutdown_timeout"`
	LogLevel         string        `yaml:"log_level"`
	LogFormat        string        `yaml:"log_format"`
	ConnLog          string        `yaml:"conn_log"`
	Metrics          string        `yaml:"metrics"`
	PidFile          string        `yaml:"pid_file"`
	Resolver         string        `yaml:"resolver"`
	DNSMinTTL        time.Duration `yaml:"dns_min_ttl"`
	DNSMaxTTL        time.Duration `yaml:"dns_max_ttl"`
	Admin            string        `yaml:"admin"`
	AdminAllowRemote bool          `yaml:"admin_allow_remote"`
	Defaults         R             `yaml:"defaults"`
	Routes           []R           `yaml:"routes"`
}

// loadFile reads a config file. Route settings not given in a route come
// from the file's defaults section, then from base (the command-line
// flags), where they fit the route (routeSpec.dropMisfits).
func loadFile(path string, base routeSpec) (relay.Config, fileConfig, error) {
	fc, err := readFile(path)
	if err != nil {
		return relay.Config{}, fc, err
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
		n := &fc.Routes[i]
		r, err := decodeRoute(n, i+1, defaults)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		// A route without a name is named by its listen address, so
		// two on one address (told apart by sni) would be refused as
		// `route "tcp://...": name used twice`, naming nothing the
		// file says: say what is missing, and where.
		if r.Name == "" {
			k := r.Listen.String()
			if first, ok := unnamed[k]; ok {
				errs = append(errs, fmt.Errorf("%s: line %d: the routes at lines %d and %d both listen on %s: give each a name", path, n.Line, first, n.Line, k))
				continue
			}
			unnamed[k] = n.Line
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	return cfg, fc, errors.Join(errs...)
}

// decodeRoute decodes the route n, the i-th of the file (from 1), over
// defaults and maps it onto a relay.Route.
func decodeRoute(n *yaml.Node, i int, defaults routeSpec) (relay.Route, error) {
	spec := defaults.own()
	// A route's own target or targets replaces both defaults.
	if hasKey(n, "target") || hasKey(n, "targets") {
		delete(spec, "target")
		delete(spec, "targets")
	}
	if err := n.Decode(&spec); err != nil {
		return relay.Route{}, fmt.Errorf("route %d: %s", i, oneLine(err))
	}
	spec.dropMisfits(func(key string) bool { return hasKey(n, key) })
	r, err := spec.route()
	if err != nil {
		return r, fmt.Errorf("line %d: %w", n.Line, err)
	}
	return r, nil
}

// readFile reads the config file's top level, checking the whole file
// strictly: an unknown key or a wrong value anywhere is reported at its
// line.
func readFile(path string) (fileConfig, error) {
	var fc fileConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return fc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		if err == io.EOF {
			return fc, fmt.Errorf("%s: empty config file", path)
		}
		return fc, fmt.Errorf("%s: %s", path, oneLine(err))
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
		return fc, fmt.Errorf("%s: more than one YAML document (a second --- line); put every route in one", path)
	}
	// The defaults and routes are decoded below node by node, which
	// yaml cannot do strictly: check the whole file strictly first.
	var strict fileOf[routeSpec]
	sdec := yaml.NewDecoder(bytes.NewReader(data))
	sdec.KnownFields(true)
	if err := sdec.Decode(&strict); err != nil {
		return fc, fmt.Errorf("%s: %s", path, oneLine(err))
	}
	if fc.ShutdownTimeout < 0 {
		return fc, fmt.Errorf("%s: shutdown_timeout %v is negative", path, fc.ShutdownTimeout)
	}
	return fc, nil
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
	// !!seq into main.routeFields", which goTypes says in the file's terms.
	intoType = regexp.MustCompile(` into \S+$| into \S+(;|\n)`)
	goTypes  = []struct{ prefix, want string }{
		{"main.fileOf[", "a mapping of settings and routes"},
		{"main.routeFields", "a mapping of route settings"},
		{"main.healthFields", "a mapping (interval, timeout, rise, fall)"},
		{"main.plain", "a URL or a mapping (url, weight, resolve)"},
		{"[]main.targetSpec", "a list of targets"},
		{"[]yaml.Node", "a list of routes"},
		{"[]string", "a list"},
		{"time.Duration", "a duration (30s, 1m)"},
		{"int", "an integer"},
		{"bool", "true or false"},
	}
)

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
