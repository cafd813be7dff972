package bench

import "testing"

func BenchmarkPool(b *testing.B)         { runSuite(b, "Pool") }
func BenchmarkSeedBytePool(b *testing.B) { runSuite(b, "SeedBytePool") }
func BenchmarkVsMalloc(b *testing.B)     { runSuite(b, "VsMalloc") }
func BenchmarkChaos(b *testing.B)        { runSuite(b, "Chaos") }
