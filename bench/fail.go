package bench

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// zeroio bench runs the cases with testing.Benchmark, which throws away
// what a failing benchmark logs. The cases fail through fatal and fatalf,
// which keep the message where [Failure] finds it as well.
var failures sync.Map // testing.TB -> string

func fatal(tb testing.TB, args ...any) {
	msg := strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	failures.Store(tb, msg)
	tb.Fatal(msg)
}

func fatalf(tb testing.TB, format string, args ...any) {
	fatal(tb, fmt.Sprintf(format, args...))
}

// Failure returns, and forgets, the message a case failed b with, or ""
// if it did not fail through its own checks.
func Failure(b *testing.B) string {
	v, ok := failures.LoadAndDelete(testing.TB(b))
	if !ok {
		return ""
	}
	return v.(string)
}
