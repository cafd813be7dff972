//go:build !linux

package bench

// raisePriority does nothing where the relay suites do not run.
func raisePriority() (restore func(), err error) { return func() {}, nil }

func canRaisePriority() error { return nil }
