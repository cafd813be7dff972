package main

import (
	"flag"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// relayDoc is the relay's reference, which must name every flag and
// every configuration file key.
const relayDoc = "../../docs/relay.md"

func readRelayDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(relayDoc)
	if err != nil {
		t.Fatalf("reading the relay reference: %v", err)
	}
	return string(b)
}

// TestRelayDocNamesEveryFlag fails when a flag of zeroio relay is missing
// from docs/relay.md, where each is written in backquotes as `--name`
// (or `-c` for a one-letter flag), followed by its value if it takes one.
func TestRelayDocNamesEveryFlag(t *testing.T) {
	doc := readRelayDoc(t)
	var n int
	newRelayFlags().fs.VisitAll(func(f *flag.Flag) {
		n++
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		if !regexp.MustCompile("`" + dash + regexp.QuoteMeta(f.Name) + "[` =]").MatchString(doc) {
			t.Errorf("%s does not document the flag %s%s", relayDoc, dash, f.Name)
		}
	})
	if n == 0 {
		t.Fatal("zeroio relay registers no flags")
	}
}

// TestRelayDocNamesEveryKey fails when a key of the relay's configuration
// file is missing from docs/relay.md, where each is written in
// backquotes, as `key` or `key: value`.
func TestRelayDocNamesEveryKey(t *testing.T) {
	doc := readRelayDoc(t)
	keys := yamlKeys(reflect.TypeFor[fileOf[routeSpec]](), nil)
	if len(keys) == 0 {
		t.Fatal("no YAML keys found in the config file's types")
	}
	for _, k := range keys {
		if !regexp.MustCompile("`" + regexp.QuoteMeta(k) + "[`:]").MatchString(doc) {
			t.Errorf("%s does not document the config file key %s", relayDoc, k)
		}
	}
}

// yamlKeys returns the yaml tag names of t's fields and of the structs
// they hold (through pointers, slices and maps), each once.
func yamlKeys(t reflect.Type, seen map[reflect.Type]bool) []string {
	if seen == nil {
		seen = map[reflect.Type]bool{}
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, name)
		for _, k := range yamlKeys(f.Type, seen) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// TestYAMLKeysFindsNested checks that yamlKeys reaches the keys of
// structs nested in slices and pointers: health_check's and a targets
// entry's.
func TestYAMLKeysFindsNested(t *testing.T) {
	keys := yamlKeys(reflect.TypeFor[fileOf[routeSpec]](), nil)
	for _, want := range []string{"max_conns", "routes", "listen", "health_check", "rise", "url", "weight"} {
		if !slices.Contains(keys, want) {
			t.Errorf("yamlKeys misses %q; got %v", want, keys)
		}
	}
}
