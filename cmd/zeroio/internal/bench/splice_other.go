//go:build !linux

package bench

func init() {
	register(Suite{Group: "splice", Name: "Splice", Metric: "MB/s",
		Cases: func(Scale) []Case { return nil },
		// The peers are child processes handed socketpair(2) ends through
		// ExtraFiles, and elsewhere splice.Copy is a buffered copy like
		// io.Copy: there is nothing zero-copy to measure.
		Available: func() string { return "splice benchmarks run on Linux only" },
	})
}
