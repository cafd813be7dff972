package relay

import (
	"net"
	"os"

	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
	"golang.org/x/sys/unix"
)

// replyState is what relayInto, the RawConn.Read callback of a session's
// upstream socket, works on. The method value is bound once per session,
// so relaying allocates nothing.
type replyState struct {
	err error
	fn  func(fd uintptr) bool
}

// relayReplies moves the target's replies to the client until the read
// deadline passes, the socket fails or the route closes, and returns why.
//
// It is one RawConn.Read whose callback reads what the upstream socket
// holds, up to replyBatch datagrams at a time packed one after another
// into one pooled buffer, sends them on, and declines (so the netpoller
// waits) once read(2) finds the socket empty. An idle session holds no
// buffer: a wake takes one from the pool, and an empty socket gives it
// back at once. Waiting right after the read that found the socket empty,
// within the same RawConn.Read, costs one read(2) per wake: a wait that
// began in a new RawConn.Read would first have to look again (it resets
// the poller's readiness, and edge-triggered epoll reports only datagrams
// that arrive later).
//
// The socket is connected, so read(2) gets only the target's datagrams,
// and each read(2) is given 65,535 bytes, which hold any UDP payload whole.
func (s *session) relayReplies() error {
	r := &s.reply
	if r.fn == nil {
		r.fn = s.relayInto
	}
	r.err = nil
	err := s.rc.Read(r.fn)
	if err == nil {
		err = r.err
	}
	r.err = nil
	return err
}

func (s *session) relayInto(fd uintptr) bool {
	r := &s.reply
	for {
		b := batches.Get().(*batch)
		b.buf = pool.Get(replyBuf)
		n, off, empty := 0, 0, false
		for n < replyBatch && len(b.buf)-off >= maxDatagram {
			k, err := nbsys.Read(int(fd), b.buf[off:off+maxDatagram])
			if err == unix.EINTR {
				continue
			}
			if err != 0 {
				if err != unix.EAGAIN {
					r.err = os.NewSyscallError("read", err) // ECONNREFUSED and the like
				}
				empty = true
				break
			}
			b.in[n] = udp.Message{Buf: b.buf[off : off+k : off+k], N: k}
			off += k
			n++
		}
		ok := n == 0 || s.sendReplies(b, n)
		b.release()
		switch {
		case !ok:
			r.err = net.ErrClosed
			return true
		case r.err != nil:
			return true
		case empty:
			return false // wait for more
		}
	}
}
