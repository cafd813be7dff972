//go:build !linux

package relay

import "github.com/zeroio/zeroio/udp"

// setBuffers resizes an open UDP socket's receive and send buffers as
// udp.Options.ReadBuffer and WriteBuffer size a new one.
func setBuffers(c *udp.Conn, n int) error {
	if err := c.SetReadBuffer(n); err != nil {
		return err
	}
	return c.SetWriteBuffer(n)
}
