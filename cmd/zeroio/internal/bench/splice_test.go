package bench

import "testing"

func BenchmarkSplice(b *testing.B) { runSuite(b, "Splice") }
