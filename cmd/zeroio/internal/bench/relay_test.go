package bench

import "testing"

func BenchmarkRelayIperf3(b *testing.B)  { runSuite(b, "RelayIperf3") }
func BenchmarkRelayIdle(b *testing.B)    { runSuite(b, "RelayIdle") }
func BenchmarkRelayUDP(b *testing.B)     { runSuite(b, "RelayUDP") }
func BenchmarkRelayLatency(b *testing.B) { runSuite(b, "RelayLatency") }
func BenchmarkRelayStreams(b *testing.B) { runSuite(b, "RelayStreams") }
