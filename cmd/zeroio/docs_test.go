package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
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
	for t != reflect.TypeFor[routeSpec]() && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
		t = t.Elem()
	}
	if seen[t] {
		return nil
	}
	seen[t] = true
	var keys []string
	if t == reflect.TypeFor[routeSpec]() { // a map of routeSettings' values
		for _, st := range routeSettings {
			keys = append(keys, st.key)
			for _, k := range yamlKeys(st.typ, seen) {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		return keys
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
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

// TestDocLinksResolve fails when a relative link in README.md or docs/
// points at a file or directory that does not exist.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if target == "" {
				if !slices.Contains(anchors(string(b)), anchor) {
					t.Errorf("%s links to #%s, which no heading of it is", f, anchor)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
			}
		}
	}
}

// anchors returns the anchors GitHub gives the headings of the Markdown
// text md, outside fenced code: lower case, spaces as hyphens, other
// punctuation dropped.
func anchors(md string) []string {
	var out []string
	fenced := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestRelayDocNamesEveryLogLine fails when a log message the relay
// writes (a string literal passed to a slog call in package relay or
// here) is missing from docs/relay.md, where each is written in
// backquotes.
func TestRelayDocNamesEveryLogLine(t *testing.T) {
	doc := readRelayDoc(t)
	var msgs []string
	for _, dir := range []string{"../../relay", "."} {
		msgs = append(msgs, logMessages(t, dir)...)
	}
	if len(msgs) == 0 {
		t.Fatal("found no log calls")
	}
	for _, m := range msgs {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("%s does not document the log line %q", relayDoc, m)
		}
	}
}

// logMessages returns the messages of the slog calls in the Go files of
// dir, tests left out, whose message is a string literal: x.log.Info("msg",
// ...), log.Warn, the event engine's c.debug("msg"), and Log and LogAttrs
// with the message third.
func logMessages(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var msgs []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			arg := -1
			switch sel.Sel.Name {
			case "Debug", "Info", "Warn", "Error":
				if isLogger(sel.X) {
					arg = 0
				}
			case "Log", "LogAttrs":
				if isLogger(sel.X) {
					arg = 2
				}
			case "debug":
				arg = 0
			}
			if arg < 0 || len(call.Args) <= arg {
				return true
			}
			lit, ok := call.Args[arg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && !slices.Contains(msgs, s) {
				msgs = append(msgs, s)
			}
			return true
		})
	}
	return msgs
}

// isLogger reports whether x names a logger: log, or a field log.
func isLogger(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "log"
	case *ast.SelectorExpr:
		return x.Sel.Name == "log"
	}
	return false
}

// TestRelayDocNamesEveryMetric fails when a metric the relay exports at
// /metrics (beyond the Go client's go_ and process_ ones) is missing
// from docs/relay.md, where each is written in backquotes.
func TestRelayDocNamesEveryMetric(t *testing.T) {
	doc := readRelayDoc(t)
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		relayCollector{}.Describe(ch)
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var n int
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %v", d)
		}
		n++
		if !strings.Contains(doc, "`"+m[1]+"`") {
			t.Errorf("%s does not document the metric %s", relayDoc, m[1])
		}
	}
	if n == 0 {
		t.Fatal("the relay's collector describes no metrics")
	}
}
