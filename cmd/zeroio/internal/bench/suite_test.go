package bench

import "testing"

// runSuite runs a registered suite as sub-benchmarks of b, for
// `go test -bench`; zeroio bench runs the cases itself.
func runSuite(b *testing.B, name string) {
	for _, s := range registry {
		if s.Name != name {
			continue
		}
		if s.Available != nil {
			if why := s.Available(); why != "" {
				skip(b, why)
			}
		}
		for _, c := range s.Cases(Full) {
			b.Run(c.Name, c.F)
		}
		return
	}
	fatalf(b, "no suite %q", name)
}
