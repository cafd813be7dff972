//go:build !linux

package relay

// checkUnbound has nothing to check here: Workers > 1 is refused off
// Linux (reusePortSupported), so every listener binds alone and bind(2)
// itself refuses an address in use.
func checkUnbound(network, addr string) error { return nil }
