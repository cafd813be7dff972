//go:build !linux

package udp

// setGRO: there is no UDP_GRO on GOOS other than linux.
func (c *Conn) setGRO(bool) bool { return false }

// stopGRO has nothing to do on GOOS other than linux: GRO is never on.
func (c *Conn) stopGRO() {}
