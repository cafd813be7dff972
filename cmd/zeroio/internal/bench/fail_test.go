package bench

import "testing"

// A case that fails through fatalf leaves its message for zeroio bench,
// which runs it under testing.Benchmark (that discards b's log).
func TestFailureKeepsMessage(t *testing.T) {
	var got, again string
	testing.Benchmark(func(b *testing.B) {
		defer func() { got, again = Reason(b), Reason(b) }()
		fatalf(b, "haproxy did not listen on %s", "127.0.0.1:1")
	})
	if got != "haproxy did not listen on 127.0.0.1:1" || again != "" {
		t.Errorf("Reason = %q, then %q", got, again)
	}
}
