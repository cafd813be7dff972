package bench

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// idleFDShortage says why a case of n idle connections through impl
// cannot run under this process's open-file limit, "" if it can. Past the
// limit the backend's Accept fails, the connections it never accepts get
// no reply, and every client waits out its 30 s deadline: a run that
// seems to hang. This process holds a client and a backend end per
// connection, the relay both of its ends, and iocopy two pipes (four
// descriptors) more; 64 spare for everything else.
func idleFDShortage(impl string, n int) string {
	limit, ok := openFileLimit()
	if !ok {
		return ""
	}
	need := 2*n + 64
	if impl == "iocopy" {
		need = 6*n + 64
	}
	if uint64(need) > limit {
		return fmt.Sprintf("%d idle connections through %s need %d open files; the limit is %d (ulimit -n)", n, impl, need, limit)
	}
	return ""
}

// relayIdleCases: N connections relayed to a backend, one byte exchanged
// each way, then left idle. The metrics are the relay process's resident
// memory per connection (VmRSS after minus before) and the pipe
// descriptors it holds. The standard library's io.Copy relay holds two
// pipes (four descriptors) per idle connection, so it runs only at 500
// connections: at 5,000 it would pass the 20,000-descriptor limit.
func relayIdleCases(sc Scale) []Case {
	var cs []Case
	for _, n := range []int{500, 5000} {
		for _, impl := range []string{"zeroio", "iocopy", "copy64k", "haproxy"} {
			if n > 500 && impl == "iocopy" || sc < Full && n > 500 || !havePeer(impl) {
				continue
			}
			cs = append(cs, Case{fmt.Sprintf("conns=%d/impl=%s", n, impl), func(b *testing.B) {
				runRelayIdle(b, impl, n)
			}})
		}
	}
	return cs
}

func runRelayIdle(b *testing.B, impl string, n int) {
	if impl == "haproxy" {
		if why := needTools(impl); why != "" {
			skip(b, why)
		}
	}
	if why := idleFDShortage(impl, n); why != "" {
		skip(b, why)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(b, err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	var mu sync.Mutex
	var backConns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			backConns = append(backConns, c)
			mu.Unlock()
			accepted.Add(1)
			go func() {
				var x [1]byte
				if _, err := io.ReadFull(c, x[:]); err == nil {
					c.Write(x[:])
				}
			}()
		}
	}()
	b.ReportAllocs()
	var perConn, pipes float64
	for range b.N {
		b.StopTimer()
		p, err := startRelayProc(impl, "tcp://"+ln.Addr().String())
		if err != nil {
			fatal(b, err)
		}
		pid := p.cmd.Process.Pid
		time.Sleep(100 * time.Millisecond)
		rss0 := procStatus(pid, "VmRSS")
		b.StartTimer()
		clients := make([]net.Conn, n)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					c, err := net.Dial("tcp", p.addr)
					if err != nil {
						failed.Add(1)
						continue
					}
					clients[i] = c
					c.SetDeadline(time.Now().Add(30 * time.Second))
					var x [1]byte
					if _, err := c.Write([]byte{'x'}); err != nil {
						failed.Add(1)
					} else if _, err := io.ReadFull(c, x[:]); err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if f := failed.Load(); f > 0 {
			fatalf(b, "%d of %d connections failed", f, n)
		}
		time.Sleep(300 * time.Millisecond) // idle
		b.StopTimer()
		rss1 := procStatus(pid, "VmRSS")
		perConn += (rss1 - rss0) / float64(n)
		pipes += float64(procPipes(pid))
		for _, c := range clients {
			c.Close()
		}
		p.stop()
		mu.Lock()
		for _, c := range backConns {
			c.Close()
		}
		backConns = nil
		mu.Unlock()
		b.StartTimer()
	}
	b.ReportMetric(perConn/float64(b.N), "KiB/conn")
	b.ReportMetric(pipes/float64(b.N), "pipes")
}
