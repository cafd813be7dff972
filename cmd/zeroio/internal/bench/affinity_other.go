//go:build !linux

package bench

// pinProcess does nothing where the relay suites do not run.
func pinProcess(int) (unpin func()) { return func() {} }
