//go:build !linux

package relay

import (
	"net"

	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
)

type replyState struct{}

// relayReplies moves one batch of replies to the client. On GOOS other
// than linux it blocks in ReadBatch, holding its reply buffers while the
// session is idle. (ReadBatch reads one datagram per call there and never
// exchanges the Bufs of msgs.)
func (s *session) relayReplies() error {
	b := batches.Get().(*batch)
	for i := range b.bufs {
		b.bufs[i] = pool.Get(maxDatagram)
		b.in[i] = udp.Message{Buf: b.bufs[i]}
	}
	n, err := s.up.ReadBatch(b.in[:])
	for i := n; i < len(b.bufs); i++ {
		pool.Put(b.bufs[i])
		b.bufs[i] = nil
	}
	if n > 0 && !s.sendReplies(b, n) {
		err = net.ErrClosed
	}
	b.release(n)
	return err
}
