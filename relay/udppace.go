package relay

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
)

// A UDP session's limits, decided by the functions of limit.go as a
// stream's are: MaxDuration ends it, and UploadRate and DownloadRate pace
// its datagrams through a small queue. A datagram that the session's
// bucket lets through now goes at once; one that must wait goes after its
// wait, if that is at most udpPaceDelay and the queue holds fewer than
// udpPaceQueue; any other is dropped and counted. The datagrams are read
// as they come (by the route's readers, which serve every session and
// cannot wait, and by the session's goroutine), so the queue is the
// only one: a goroutine of the session's, started only on a route with a
// rate, sends from it.
const (
	udpPaceDelay = 50 * time.Millisecond
	udpPaceQueue = 64
)

// udpPace is a session's limits: nil for a session with none.
type udpPace struct {
	end  int64 // unix nanoseconds (the session's clock) when MaxDuration ends the session; 0: never
	rate [2]ByteRate

	mu     sync.Mutex
	tat    [2]int64        // the buckets, as pacing's
	queued [2]atomic.Int32 // datagrams queued each way
	q      chan queuedDatagram
	done   chan struct{}  // closed when the session ends
	one    [1]udp.Message // the sender's scratch
}

type queuedDatagram struct {
	buf []byte // pooled
	at  int64  // mono when it may go
	dir int
}

// newUDPPace returns the limits of a session of r opened at now (unix
// nanoseconds), or nil when r has none.
func newUDPPace(r *Route, now int64) *udpPace {
	if r.MaxDuration <= 0 && r.UploadRate == 0 && r.DownloadRate == 0 {
		return nil
	}
	p := &udpPace{rate: [2]ByteRate{r.UploadRate, r.DownloadRate}, done: make(chan struct{})}
	if r.MaxDuration > 0 {
		p.end = now + int64(r.MaxDuration)
	}
	if r.UploadRate > 0 || r.DownloadRate > 0 {
		p.q = make(chan queuedDatagram, udpPaceQueue)
	}
	return p
}

// paced reports whether the session's direction d has a rate.
func (s *session) paced(d int) bool { return s.limit != nil && s.limit.rate[d] > 0 }

// gcraDelay takes n bytes at rate from the bucket tat at now, if they
// can go within maxDelay: it returns how long they wait (0: at once), or
// false, the bucket untouched, when they cannot.
func gcraDelay(tat *int64, n int, rate ByteRate, now, maxDelay int64) (int64, bool) {
	t := max(*tat, now)
	cost := byteCost(n, rate)
	wait := max(t+cost-paceWindow-now, 0)
	if wait > maxDelay {
		return 0, false
	}
	*tat = t + cost
	return wait, true
}

// pace passes msgs, datagrams of the session's direction d, through its
// rate: it returns those that go at once, in msgs' storage, and queues
// or drops the others. A datagram goes at once only while none of its
// direction waits before it.
func (s *session) pace(d int, msgs []udp.Message) []udp.Message {
	p, st := s.limit, &s.u.rt.st
	now := mono()
	out := msgs[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		wait, ok := gcraDelay(&p.tat[d], len(m.Buf), p.rate[d], now, int64(udpPaceDelay))
		switch {
		case ok && wait == 0 && p.queued[d].Load() == 0:
			out = append(out, m)
		case ok && len(p.q) < cap(p.q):
			b := pool.Get(len(m.Buf))
			copy(b, m.Buf)
			p.queued[d].Add(1)
			p.q <- queuedDatagram{buf: b, at: now + wait, dir: d}
		default:
			if ok { // the queue is full: give the bytes back
				p.tat[d] -= byteCost(len(m.Buf), p.rate[d])
			}
			st.pacedDrops.Add(1)
			continue
		}
		st.pacedBytes.Add(uint64(len(m.Buf)))
	}
	return out
}

// sendQueued is the goroutine of a session with a rate: it sends the
// queued datagrams as their time comes, until the session ends.
func (s *session) sendQueued() {
	p, st := s.limit, &s.u.rt.st
	defer s.u.rt.srv.serveWG.Done()
	var t *time.Timer
	for {
		var d queuedDatagram
		select {
		case d = <-p.q:
		case <-p.done:
			for range len(p.q) {
				pool.Put((<-p.q).buf)
			}
			return
		}
		if wait := d.at - mono(); wait > 0 {
			if t == nil {
				t = time.NewTimer(time.Duration(wait))
			} else {
				t.Reset(time.Duration(wait))
			}
			st.pacedNanos.Add(uint64(wait))
			<-t.C
		}
		if d.dir == dirUp {
			if _, err := s.up.Write(d.buf); err == nil {
				st.udpPacketsUp.Add(1)
			} else {
				st.udpDropWrite.Add(1)
			}
		} else {
			c := s.peer.Load()
			p.one[0] = udp.Message{Buf: d.buf, Addr: c.client, Local: c.local, IfIndex: c.ifidx}
			s.writeReplies(p.one[:])
			p.one[0] = udp.Message{}
		}
		p.queued[d.dir].Add(-1)
		pool.Put(d.buf)
	}
}

// deadline is when the session ends, unless a datagram moves last on:
// after timeout without one, or at its MaxDuration.
func (s *session) deadline(timeout time.Duration) time.Time {
	d := time.Unix(0, s.last.Load()).Add(timeout)
	if p := s.limit; p != nil && p.end != 0 && p.end < d.UnixNano() {
		return time.Unix(0, p.end)
	}
	return d
}

// overDuration reports whether the session reached its MaxDuration at
// now (unix nanoseconds).
func (s *session) overDuration(now int64) bool {
	p := s.limit
	return p != nil && p.end != 0 && now >= p.end
}
