//go:build !linux

package relay

// unhashUDP is not needed where a port is never shared.
func unhashUDP(c controller) error { return reusePortSupported() }

// settleSteering has nothing to wait for where nothing is steered.
func settleSteering() {}
