package relay

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The rate limits and MaxDuration, on every engine, with and without
// splice. Times are asserted only as generous bounds that show a limit
// at work (a paced download takes seconds, an unlimited one a fraction
// of that).

func TestConnRatePerClient(t *testing.T) { forEachEngine(t, testConnRatePerClient) }

func testConnRatePerClient(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	be := startBackend(t, "tcp4", func(c net.Conn) { reached.Add(1); echo(c) })
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) {
		r.ConnRatePerClient = ConnRate{N: 10, Per: time.Second}
	}))
	// 40 back to back: a period's burst is relayed, the rest closed.
	start := time.Now()
	var cs []net.Conn
	for range 40 {
		c := dialRoute(t, s, "r")
		defer c.Close()
		cs = append(cs, c)
	}
	relayed := 0
	for _, c := range cs {
		if ping(c) == nil {
			relayed++
		}
	}
	// The bucket refills one connection every 100 ms while the 40 are
	// dialled, admitted and checked.
	extra := int(time.Since(start) / (100 * time.Millisecond))
	if relayed < 10 || relayed > 11+extra {
		t.Fatalf("%d of 40 connections relayed; want about 10", relayed)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].RateLimited == uint64(40-relayed) })
	if n := reached.Load(); n != int64(relayed) {
		t.Fatalf("the target saw %d connections; %d were relayed", n, relayed)
	}
	// A period and a half later the bucket is full again.
	waitFor(t, func() bool { return time.Since(start) > 1500*time.Millisecond })
	for i := range 10 {
		c := dialRoute(t, s, "r")
		defer c.Close()
		if err := ping(c); err != nil {
			t.Fatalf("connection %d after the rate refilled: %v", i, err)
		}
	}
}

// splices runs test with the relay splicing and copying through buffers.
func splices(t *testing.T, test func(t *testing.T, noSplice bool)) {
	for _, mode := range []string{"splice", "copy"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			test(t, mode == "copy")
		})
	}
}

// sender is a target that writes n bytes to each client (all its
// clients at once), then closes; n < 0 writes until the client goes.
func sender(t *testing.T, n int) *testBackend {
	return startBackend(t, "tcp4", func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for left := n; left != 0; {
			k := len(buf)
			if left > 0 {
				k = min(k, left)
				left -= k
			}
			if _, err := c.Write(buf[:k]); err != nil {
				return
			}
		}
	})
}

// download reads everything a client of s's route r gets, and returns
// how many bytes and how long it took.
func download(t *testing.T, s *Server) (int64, time.Duration) {
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Errorf("download: %v", err)
	}
	return n, time.Since(start)
}

func TestDownloadRate(t *testing.T) { forEachEngine(t, testDownloadRate) }

func testDownloadRate(t *testing.T) {
	t.Parallel()
	splices(t, func(t *testing.T, noSplice bool) {
		const size = 6 << 20
		be := sender(t, size)
		cfg := route0("127.0.0.1:0", be.addr, nil)
		cfg.noSplice = noSplice
		free := startRelay(t, cfg)
		n, took := download(t, free)
		if n != size || took > 2*time.Second {
			t.Fatalf("unlimited: %d bytes in %v; want %d well under the paced time", n, took, size)
		}
		cfg.Routes[0].DownloadRate = 2 << 20
		s := startRelay(t, cfg)
		n, took = download(t, s)
		if n != size || took < 2400*time.Millisecond || took > 6*time.Second {
			t.Fatalf("at 2MiB/s: %d bytes in %v; want %d in about 3 s", n, took, size)
		}
		st := s.Stats().Routes[0]
		if st.PacedBytes < size || st.PacedTime < time.Second {
			t.Fatalf("paced %d bytes, waited %v", st.PacedBytes, st.PacedTime)
		}
	})
}

// An upload is paced too, and a paced connection's waits are not idle
// time: with the bucket stretched to a second, each wait is half a
// second, far longer than the idle timeout.
func TestUploadRateNotIdle(t *testing.T) {
	defer func(w int64) { paceWindow = w }(paceWindow)
	paceWindow = int64(time.Second)
	forEachEngine(t, func(t *testing.T) {
		for _, mode := range []string{"splice", "copy"} {
			t.Run(mode, func(t *testing.T) { testUploadRateNotIdle(t, mode == "copy") })
		}
	})
}

func testUploadRateNotIdle(t *testing.T, noSplice bool) {
	const size = 256 << 10 // a bucket's worth at once, then two waits
	var got atomic.Int64
	be := startBackend(t, "tcp4", func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		got.Store(n)
		c.Write([]byte("done"))
	})
	cfg := route0("127.0.0.1:0", be.addr, func(r *Route) {
		r.UploadRate = 128 << 10
		r.IdleTimeout = 150 * time.Millisecond
	})
	cfg.noSplice = noSplice
	s := startRelay(t, cfg)
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	closeWrite(c)
	if b, err := io.ReadAll(c); err != nil || string(b) != "done" {
		t.Fatalf("after the upload: %q, %v (the target read %d bytes; %+v)", b, err, got.Load(), s.Stats().Routes[0])
	}
	if took := time.Since(start); took < 800*time.Millisecond || got.Load() != size {
		t.Fatalf("%d bytes uploaded at 128KiB/s in %v", got.Load(), took)
	}
	if st := s.Stats().Routes[0]; st.IdleTimeouts != 0 || st.PacedTime < 800*time.Millisecond {
		t.Fatalf("%d idle timeouts, %v paced", st.IdleTimeouts, st.PacedTime)
	}
}

// Two connections of one client share its client rate.
func TestClientDownloadRate(t *testing.T) { forEachEngine(t, testClientDownloadRate) }

func testClientDownloadRate(t *testing.T) {
	t.Parallel()
	splices(t, func(t *testing.T, noSplice bool) {
		const size = 3 << 20
		be := sender(t, size)
		cfg := route0("127.0.0.1:0", be.addr, func(r *Route) { r.ClientDownloadRate = 2 << 20 })
		cfg.noSplice = noSplice
		s := startRelay(t, cfg)
		start := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if n, _ := download(t, s); n != size {
					t.Errorf("downloaded %d bytes; want %d", n, size)
				}
			})
		}
		wg.Wait()
		if took := time.Since(start); took < 2400*time.Millisecond || took > 6*time.Second {
			t.Fatalf("two downloads of 3 MiB sharing 2MiB/s took %v; want about 3 s", took)
		}
	})
}

func TestMaxDuration(t *testing.T) { forEachEngine(t, testMaxDuration) }

func testMaxDuration(t *testing.T) {
	t.Parallel()
	be := sender(t, -1)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) { r.MaxDuration = 2 * time.Second }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	io.Copy(io.Discard, c)
	if took := time.Since(start); took < 1800*time.Millisecond || took > 4*time.Second {
		t.Fatalf("a stream that never ends was closed after %v; want about 2 s", took)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].MaxDurationEnds == 1 })
}
