package relay_test

import (
	"testing"

	"github.com/zeroio/zeroio/relay"
)

var benchEngines = []string{relay.EngineGoroutine, relay.EngineEvent}

// benchMoreTargets adds the several-target cases to BenchmarkRelayConnect:
// each policy over three targets.
func benchMoreTargets(b *testing.B, engine string) {
	for _, policy := range []relay.Balance{relay.RoundRobin, relay.LeastConn, relay.ClientHash} {
		b.Run("engine="+engine+"/targets=3/balance="+string(policy), func(b *testing.B) {
			var ts []relay.Target
			for _, a := range echoTargets(b, 3) {
				ts = append(ts, relay.Target{Addr: a, Weight: 1})
			}
			r := relay.Route{Targets: ts, Balance: policy}
			noIdleTimeout(&r)
			connectBench(b, engine, r)
		})
	}
	b.Run("engine="+engine+"/targets=1/idle=default", func(b *testing.B) {
		connectBench(b, engine, relay.Route{Target: echoTargets(b, 1)[0]})
	})
}

// noIdleTimeout turns r's idle timeout off, so that the cases compare
// what choosing a target costs, not the idle timer (one timer per
// connection, on by default).
func noIdleTimeout(r *relay.Route) { r.IdleTimeout = relay.Never }
