//go:build !linux

package relay

import (
	"net"

	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
)

type replyState struct{}

// relayReplies moves one reply to the client. On GOOS other than linux it
// blocks in ReadBatch, which reads one datagram per call there, holding its
// reply buffer while the session is idle.
func (s *session) relayReplies() error {
	b := batches.Get().(*batch)
	b.buf = pool.Get(maxDatagram)
	b.in[0] = udp.Message{Buf: b.buf}
	n, err := s.up.ReadBatch(b.in[:1])
	if n > 0 && !s.sendReplies(b, n) {
		err = net.ErrClosed
	}
	b.release()
	return err
}
