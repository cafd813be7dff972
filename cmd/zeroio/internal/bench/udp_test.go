package bench

import "testing"

func BenchmarkUDP(b *testing.B)           { runSuite(b, "UDP") }
func BenchmarkUDPThroughput(b *testing.B) { runSuite(b, "UDPThroughput") }
