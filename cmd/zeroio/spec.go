package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/zeroio/zeroio/relay"
)

// routeSpec is one route as given, in a config file or on the command
// line (the file's defaults section and the route flags are routeSpecs
// too): the value of each setting given, by YAML key, of the type its
// entry in routeSettings has. A value is never changed in place, so a
// copy of the map (own) is a spec of its own.
type routeSpec map[string]any

// routeFields names, in yaml's errors, the mapping a route should be.
type routeFields map[string]any

// UnmarshalYAML decodes a route mapping over s, the settings the route
// inherits: each key by its setting's decode, at its line. Keys merged
// in with << fill in those the mapping does not give, as in yaml. Every
// unknown key and wrong value is reported, not only the first.
func (s *routeSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		var m routeFields // yaml's error, "want a mapping of route settings"
		return n.Decode(&m)
	}
	if *s == nil {
		*s = routeSpec{}
	}
	var errs []string
	for _, p := range mapPairs(n, map[string]*yaml.Node{}, nil, &errs) {
		k, v := p[0], p[1]
		st := lookupSetting(k.Value)
		if st == nil {
			errs = append(errs, fmt.Sprintf("line %d: unknown key %s", k.Line, k.Value))
			continue
		}
		val, err := st.decode(v, (*s)[k.Value])
		var te *yaml.TypeError
		switch {
		case errors.As(err, &te):
			errs = append(errs, te.Errors...)
		case err != nil:
			errs = append(errs, fmt.Sprintf("line %d: %v", v.Line, err))
		default:
			(*s)[k.Value] = val
		}
	}
	if len(errs) > 0 {
		// A TypeError lets yaml go on and report every error in the
		// file, not this one alone.
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// mapPairs appends the key and value nodes of the mapping n to out: its
// own keys, then those of the mappings merged into it with <<, in order,
// a key only where seen has none yet (the first wins). A key written
// twice in one mapping is an error in errs, as yaml has it.
func mapPairs(n *yaml.Node, seen map[string]*yaml.Node, out [][2]*yaml.Node, errs *[]string) [][2]*yaml.Node {
	var merges []*yaml.Node
	own := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Value == "<<" && k.Tag == "!!merge" {
			merges = append(merges, merged(n.Content[i+1])...)
			continue
		}
		if first, ok := own[k.Value]; ok {
			*errs = append(*errs, fmt.Sprintf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, first.Line))
			continue
		}
		own[k.Value] = k
		if seen[k.Value] == nil {
			seen[k.Value] = k
			out = append(out, [2]*yaml.Node{k, n.Content[i+1]})
		}
	}
	for _, m := range merges {
		out = mapPairs(m, seen, out, errs)
	}
	return out
}

// own returns a copy of s, to decode a route over without changing s,
// which later routes, and the next reload, read as their defaults.
func (s routeSpec) own() routeSpec {
	c := maps.Clone(s)
	if c == nil {
		c = routeSpec{}
	}
	return c
}

// route maps a spec onto a relay.Route, setting by setting; relay.Route's
// validation checks the values, the same for flags and files.
func (s routeSpec) route() (relay.Route, error) {
	listen, _ := s["listen"].(string)
	target, _ := s["target"].(string)
	targets, _ := s["targets"].([]targetSpec)
	name, _ := s["name"].(string)
	if name == "" {
		name = listen
	}
	fail := func(format string, args ...any) (relay.Route, error) {
		return relay.Route{}, fmt.Errorf("route %q: "+format, append([]any{name}, args...)...)
	}
	if listen == "" || (target == "" && len(targets) == 0) {
		return fail("needs a listen address and a target (target: URL, or targets: a list)")
	}
	if target != "" && len(targets) > 0 {
		return fail("give target or targets, not both")
	}
	var r relay.Route
	for _, st := range routeSettings {
		if v, ok := s[st.key]; ok {
			if err := st.apply(v, &r); err != nil {
				return fail("%v", err)
			}
		}
	}
	return r, nil
}

// dropMisfits clears the settings s inherited (from the file's defaults
// or the flags) that its kind of listen address does not take, as
// relay.Route.Misfits says of each alone (health checks on a UDP route,
// workers on a Unix socket, a socket file's mode on a TCP route), and
// the PROXY protocol settings on a UDP route (setting.udpOwn). A default is meant for the routes it fits; without
// this, --health-interval or a defaults' send_proxy made every UDP route
// in the file an error. Written in the route itself (own reports the
// route's keys), such a setting stays, for relay.New to refuse.
func (s routeSpec) dropMisfits(own func(key string) bool) {
	listen, _ := s["listen"].(string)
	l, err := relay.ParseAddr(listen)
	if err != nil {
		return // route reports it
	}
	for _, st := range routeSettings {
		v, ok := s[st.key]
		if !ok || own(st.key) {
			continue
		}
		probe := relay.Route{Listen: l}
		if st.udpOwn && l.Datagram() || st.apply(v, &probe) == nil && len(probe.Misfits()) > 0 {
			delete(s, st.key)
		}
	}
}

// defineRouteFlags defines the flags of routeSettings on fs, each
// setting its value in spec.
func defineRouteFlags(fs *flag.FlagSet, spec routeSpec) {
	for _, st := range routeSettings {
		for _, d := range st.flags {
			fs.Var(&routeFlag{spec: spec, key: st.key, def: d}, d.name, d.usage)
		}
	}
}

// routeFlag is the flag.Value of a route flag.
type routeFlag struct {
	spec routeSpec
	key  string
	def  flagDef
}

func (f *routeFlag) String() string {
	if f == nil || f.spec == nil {
		return ""
	}
	if v, ok := f.spec[f.key]; ok {
		return fmt.Sprint(v)
	}
	return ""
}

func (f *routeFlag) Set(s string) error {
	v, err := f.def.set(s, f.spec[f.key])
	if err != nil {
		return err
	}
	f.spec[f.key] = v
	return nil
}

func (f *routeFlag) IsBoolFlag() bool { return f != nil && f.def.isBool }

// errParse is the flag package's error for a number or boolean it cannot
// read.
var errParse = errors.New("parse error")

func stringFlag(name, usage string) flagDef {
	return flagDef{name: name, usage: usage, set: func(s string, _ any) (any, error) { return s, nil }}
}

func boolFlag(name, usage string) flagDef {
	return flagDef{name: name, usage: usage, isBool: true, set: func(s string, _ any) (any, error) {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return nil, errParse
		}
		return v, nil
	}}
}

func intFlag(name, usage string) flagDef {
	return flagDef{name: name, usage: usage, set: func(s string, _ any) (any, error) {
		var v integer
		err := setInteger(&v, s)
		return v, err
	}}
}

func setInteger(dst *integer, s string) error {
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errParse
	}
	*dst = integer(v)
	return nil
}

func durationFlag(name, usage string) flagDef {
	return flagDef{name: name, usage: usage, set: func(s string, _ any) (any, error) {
		var d duration
		err := d.Set(s)
		return d, err
	}}
}

// listFlag appends the comma-separated items of each use of the flag.
func listFlag(name, usage string) flagDef {
	return flagDef{name: name, usage: usage, set: func(s string, old any) (any, error) {
		l, _ := old.([]string)
		l = l[:len(l):len(l)] // a value is never changed in place
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				l = append(l, p)
			}
		}
		return l, nil
	}}
}

// healthFlag sets one field of the health check.
func healthFlag(name, usage string, set func(h *healthSpec, s string) error) flagDef {
	return flagDef{name: name, usage: usage, set: func(s string, old any) (any, error) {
		h, _ := old.(healthSpec)
		err := set(&h, s)
		return h, err
	}}
}
