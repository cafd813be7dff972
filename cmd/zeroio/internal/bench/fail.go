package bench

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// zeroio bench runs the cases with testing.Benchmark, which throws away
// what a benchmark logs. The cases fail through fatal and fatalf, and skip
// through skip, which keep the message where [Reason] finds it as well.
var failures sync.Map // testing.TB -> string

func fatal(tb testing.TB, args ...any) {
	msg := strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	failures.Store(tb, msg)
	tb.Fatal(msg)
}

func fatalf(tb testing.TB, format string, args ...any) {
	fatal(tb, fmt.Sprintf(format, args...))
}

func skip(tb testing.TB, why string) {
	failures.Store(tb, why)
	tb.Skip(why)
}

// Reason returns, and forgets, the message a case failed or skipped b
// with, or "" if it did neither through its own checks.
func Reason(b *testing.B) string {
	v, ok := failures.LoadAndDelete(testing.TB(b))
	if !ok {
		return ""
	}
	return v.(string)
}
