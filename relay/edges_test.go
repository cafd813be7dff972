package relay

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// Edges of a stream's life that an engine reading speculatively, or
// relaying from buffers of its own, could get wrong.

// TestEarlyDataAndEOF: a client that writes its whole request and shuts
// down writing at once, before the relay could have connected to the
// target, gets its answer: the bytes and the EOF reach the target in
// order, after the PROXY header when the route sends one.
func TestEarlyDataAndEOF(t *testing.T) { forEachEngine(t, testEarlyDataAndEOF) }

func testEarlyDataAndEOF(t *testing.T) {
	for _, proxy := range []int{0, 2} {
		t.Run(map[int]string{0: "plain", 2: "send-proxy-v2"}[proxy], func(t *testing.T) {
			leakCheck(t)
			b := startBackend(t, "tcp4", func(c net.Conn) {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if proxy != 0 {
					if _, err := proxyproto.ReadHeader(c); err != nil {
						io.WriteString(c, "bad header: "+err.Error())
						return
					}
				}
				got, err := io.ReadAll(c)
				if err != nil {
					io.WriteString(c, "read: "+err.Error())
					return
				}
				c.Write(append([]byte("got "), got...))
			})
			s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.SendProxy = proxy }))
			eachClient(t, s, "r", 40, func(i int, c net.Conn) {
				req := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*397)
				c.Write(req)
				closeWrite(c)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := io.ReadAll(c)
				if err != nil || !bytes.Equal(resp, append([]byte("got "), req...)) {
					t.Errorf("client %d: %d bytes back (%q...), %v", i, len(resp), resp[:min(len(resp), 20)], err)
				}
			})
			waitFor(t, func() bool { return s.Stats().Active == 0 })
		})
	}
}

// TestClientGoneBeforeTarget: clients that connect and go away at once
// (closed or reset, before or while the relay dials) leave no connection
// open on the relay or at the target.
func TestClientGoneBeforeTarget(t *testing.T) { forEachEngine(t, testClientGoneBeforeTarget) }

func testClientGoneBeforeTarget(t *testing.T) {
	leakCheck(t)
	var open atomic.Int64
	b := startBackend(t, "tcp4", func(c net.Conn) {
		open.Add(1)
		defer open.Add(-1)
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.Copy(io.Discard, c) // until the relay passes the client's end on
	})
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	for i := range 200 {
		c := dialRoute(t, s, "r")
		if i%2 == 0 {
			c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}
	waitFor(t, func() bool { return s.Stats().Active == 0 && open.Load() == 0 })
}

// TestReplyThenEnd: a target that writes its reply and ends at once,
// with a FIN or a reset, so that the end often arrives with the bytes
// and the relay reads on to it before passing them on: the client gets
// every byte of the reply, then the end of the stream (a reset may reach
// it as one).
func TestReplyThenEnd(t *testing.T) { forEachEngine(t, testReplyThenEnd) }

func testReplyThenEnd(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "fin", true: "reset"}[reset], func(t *testing.T) {
			leakCheck(t)
			reply := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1+(i*1031)%40000) }
			b := startBackend(t, "tcp4", func(c net.Conn) {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var n [4]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				c.Write(reply(int(n[0]) | int(n[1])<<8))
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
			})
			s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
			eachClient(t, s, "r", 60, func(i int, c net.Conn) {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.Write([]byte{byte(i), byte(i >> 8), 0, 0})
				got, err := io.ReadAll(c)
				want := reply(i)
				if !bytes.Equal(got, want) {
					t.Errorf("client %d: %d bytes of the %d-byte reply (%v)", i, len(got), len(want), err)
					return
				}
				if err != nil && !reset {
					t.Errorf("client %d: %v after the reply, want EOF", i, err)
				}
			})
			waitFor(t, func() bool { return s.Stats().Active == 0 })
		})
	}
}

// TestDownloadOutlastsIdleTimeout: a transfer in one direction only, in
// small writes spread over several idle timeouts, is not cut as idle:
// bytes moving either way are activity.
func TestDownloadOutlastsIdleTimeout(t *testing.T) {
	forEachEngine(t, testDownloadOutlastsIdleTimeout)
}

func testDownloadOutlastsIdleTimeout(t *testing.T) {
	leakCheck(t)
	const idle = time.Second
	chunk := bytes.Repeat([]byte("z"), 4096)
	const chunks = 25 // one every idle/10: 2.5 idle periods in all
	b := startBackend(t, "tcp4", func(c net.Conn) {
		for range chunks {
			if _, err := c.Write(chunk); err != nil {
				return
			}
			time.Sleep(idle / 10)
		}
	})
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.IdleTimeout = idle }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != chunks*int64(len(chunk)) {
		t.Fatalf("downloaded %d of %d bytes: %v", n, chunks*len(chunk), err)
	}
	if st := s.Stats().Routes[0]; st.IdleTimeouts != 0 {
		t.Fatalf("%d idle timeouts on a moving download", st.IdleTimeouts)
	}
}

// TestSlowReader: a target that writes far faster than its client reads:
// every byte arrives, in order, however the relay holds them meanwhile.
func TestSlowReader(t *testing.T) { forEachEngine(t, testSlowReader) }

func testSlowReader(t *testing.T) {
	leakCheck(t)
	const size = 16 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7 >> 3)
	}
	want := sha256.Sum256(data)
	b := startBackend(t, "tcp4", func(c net.Conn) {
		c.SetDeadline(time.Now().Add(60 * time.Second))
		c.Write(data)
	})
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	h := sha256.New()
	buf := make([]byte, 32<<10)
	var n int
	for reads := 0; ; reads++ {
		k, err := c.Read(buf)
		h.Write(buf[:k])
		n += k
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", n, err)
		}
		if reads%16 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n != size || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("%d of %d bytes, hash equal %v", n, size, bytes.Equal(h.Sum(nil), want[:]))
	}
}

// TestTargetLeavesMidUpload: a target that closes without reading while
// its client is still sending ends the client's connection (an EOF or a
// reset, not a hang), and the relay keeps nothing open.
func TestTargetLeavesMidUpload(t *testing.T) { forEachEngine(t, testTargetLeavesMidUpload) }

func testTargetLeavesMidUpload(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", func(c net.Conn) {
		var one [1]byte
		c.Read(one[:]) // the upload has begun
	})
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	for range 5 {
		c := dialRoute(t, s, "r")
		c.SetDeadline(time.Now().Add(20 * time.Second))
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					done <- err
					return
				}
			}
		}()
		var one [1]byte
		_, rerr := c.Read(one[:])
		werr := <-done
		if isTimeout(rerr) || isTimeout(werr) {
			t.Fatalf("client hung: read %v, write %v", rerr, werr)
		}
		c.Close()
	}
	waitFor(t, func() bool { return s.Stats().Active == 0 })
}
