package bench

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/net/ipv4"
	wgconn "golang.zx2c4.com/wireguard/conn"
)

// udpSockBuf sizes every impl's socket buffers alike (wireguard-go's own
// StdNetBind uses 7 MiB), so that a burst of 512 datagrams is not dropped
// by a default-sized receive buffer.
const udpSockBuf = 64 << 20

// udpPair is one impl's sending and receiving end on loopback, set up for
// datagrams of size bytes.
type udpPair struct {
	// send sends count datagrams (count <= the batch it was opened for).
	send func(count int) error
	// recv reads at most max datagrams, blocking for the first.
	recv func(max int) (int, error)
	// unblock makes a blocked or later recv return an error.
	unblock func()
	close   func()
}

type udpImpl struct {
	name string
	open func(tb testing.TB, size, batch int) udpPair
}

var udpImpls = []udpImpl{
	{"stdnet-addrport", openStdAddrPort},
	{"stdnet-addr", openStdAddr},
	{"xnet", openXNet},
	{"wggo", openWGGo},
	{"zeroio", func(tb testing.TB, size, batch int) udpPair {
		return openZeroio(tb, size, batch, &udp.Options{DisableGSO: true, DisableGRO: true}, false)
	}},
	{"zeroio-gso", func(tb testing.TB, size, batch int) udpPair {
		return openZeroio(tb, size, batch, &udp.Options{}, false)
	}},
	// zeroio-gso-carved sends from Bufs cut back to back from one array,
	// as a sender that fills one large buffer has them: each GSO run goes
	// out as one iovec.
	{"zeroio-gso-carved", func(tb testing.TB, size, batch int) udpPair {
		return openZeroio(tb, size, batch, &udp.Options{}, true)
	}},
}

func listenUDP4(tb testing.TB) *net.UDPConn {
	tb.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fatal(tb, err)
	}
	setSockBuf(tb, c, udpSockBuf)
	return c
}

func stdPair(tb testing.TB) (tx, rx *net.UDPConn) {
	tx, rx = listenUDP4(tb), listenUDP4(tb)
	return tx, rx
}

func deadlineNow(c *net.UDPConn) func() {
	return func() { c.SetReadDeadline(time.Now()) }
}

func closeBoth(a, b interface{ Close() error }) func() {
	return func() { a.Close(); b.Close() }
}

// openStdAddrPort: one datagram per call, net.UDPConn with netip.AddrPort.
func openStdAddrPort(tb testing.TB, size, batch int) udpPair {
	tx, rx := stdPair(tb)
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	out, in := make([]byte, size), make([]byte, size+1)
	return udpPair{
		send: func(count int) error {
			for range count {
				if _, err := tx.WriteToUDPAddrPort(out, dst); err != nil {
					return err
				}
			}
			return nil
		},
		recv: func(int) (int, error) {
			_, _, err := rx.ReadFromUDPAddrPort(in)
			if err != nil {
				return 0, err
			}
			return 1, nil
		},
		unblock: deadlineNow(rx),
		close:   closeBoth(tx, rx),
	}
}

// openStdAddr: one datagram per call, net.UDPConn with net.Addr.
func openStdAddr(tb testing.TB, size, batch int) udpPair {
	tx, rx := stdPair(tb)
	var dst net.Addr = rx.LocalAddr()
	out, in := make([]byte, size), make([]byte, size+1)
	return udpPair{
		send: func(count int) error {
			for range count {
				if _, err := tx.WriteTo(out, dst); err != nil {
					return err
				}
			}
			return nil
		},
		recv: func(int) (int, error) {
			_, _, err := rx.ReadFrom(in)
			if err != nil {
				return 0, err
			}
			return 1, nil
		},
		unblock: deadlineNow(rx),
		close:   closeBoth(tx, rx),
	}
}

// openXNet: golang.org/x/net/ipv4 PacketConn ReadBatch / WriteBatch
// (recvmmsg / sendmmsg on Linux).
func openXNet(tb testing.TB, size, batch int) udpPair {
	tx, rx := stdPair(tb)
	ptx, prx := ipv4.NewPacketConn(tx), ipv4.NewPacketConn(rx)
	dst := rx.LocalAddr()
	out := make([]ipv4.Message, batch)
	for i := range out {
		out[i] = ipv4.Message{Buffers: [][]byte{make([]byte, size)}, Addr: dst}
	}
	in := make([]ipv4.Message, batch)
	for i := range in {
		in[i] = ipv4.Message{Buffers: [][]byte{make([]byte, size+1)}}
	}
	return udpPair{
		send: func(count int) error {
			for sent := 0; sent < count; {
				n, err := ptx.WriteBatch(out[sent:count], 0)
				if err != nil {
					return err
				}
				sent += n
			}
			return nil
		},
		recv: func(max int) (int, error) {
			return prx.ReadBatch(in[:min(max, len(in))], 0)
		},
		unblock: deadlineNow(rx),
		close:   closeBoth(tx, rx),
	}
}

// openWGGo: wireguard-go's conn.StdNetBind, as wireguard-go uses it: batches
// of up to IdealBatchSize, GSO/GRO where the kernel has them, receive
// buffers of 64 KiB (the device's MaxMessageSize).
func openWGGo(tb testing.TB, size, batch int) udpPair {
	txb, rxb := wgconn.NewStdNetBind(), wgconn.NewStdNetBind()
	_, txPort, err := txb.Open(0)
	if err != nil {
		fatal(tb, err)
	}
	fns, port, err := rxb.Open(0)
	if err != nil {
		txb.Close()
		fatal(tb, err)
	}
	setSockBufOnPort(tb, txPort, udpSockBuf)
	setSockBufOnPort(tb, port, udpSockBuf)
	ep, err := txb.ParseEndpoint(fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		fatal(tb, err)
	}
	const bs = wgconn.IdealBatchSize
	// Send buffers carry spare capacity: StdNetBind coalesces a GSO run by
	// appending the following datagrams to the first buffer.
	out := make([][]byte, bs)
	for i := range out {
		out[i] = make([]byte, size, 1<<16)
	}
	in := make([][]byte, bs)
	for i := range in {
		in[i] = make([]byte, 1<<16)
	}
	sizes := make([]int, bs)
	eps := make([]wgconn.Endpoint, bs)
	var closed atomic.Bool
	return udpPair{
		send: func(count int) error {
			for sent := 0; sent < count; {
				k := min(count-sent, bs)
				bufs := out[:k]
				for i := range bufs {
					bufs[i] = bufs[i][:size]
				}
				if err := txb.Send(bufs, ep); err != nil {
					return err
				}
				sent += k
			}
			return nil
		},
		recv: func(int) (int, error) {
			return fns[0](in, sizes, eps)
		},
		unblock: func() {
			if closed.CompareAndSwap(false, true) {
				rxb.Close()
			}
		},
		close: func() {
			txb.Close()
			if closed.CompareAndSwap(false, true) {
				rxb.Close()
			}
		},
	}
}

// openZeroio opens a pair of Conns with opts; carve cuts the send buffers
// from one array, back to back.
func openZeroio(tb testing.TB, size, batch int, opts *udp.Options, carve bool) udpPair {
	o := *opts
	o.ReadBuffer, o.WriteBuffer = udpSockBuf, udpSockBuf
	tx, err := udp.Listen("udp4", "127.0.0.1:0", &o)
	if err != nil {
		fatal(tb, err)
	}
	rx, err := udp.Listen("udp4", "127.0.0.1:0", &o)
	if err != nil {
		fatal(tb, err)
	}
	dst := rx.AddrPort()
	out := make([]udp.Message, batch)
	arr := make([]byte, batch*size)
	for i := range out {
		out[i] = udp.Message{Buf: make([]byte, size), Addr: dst}
		if carve {
			out[i].Buf = arr[i*size : (i+1)*size : (i+1)*size]
		}
	}
	in := make([]udp.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, size+1)
	}
	return udpPair{
		send: func(count int) error {
			_, err := tx.WriteAll(out[:count])
			return err
		},
		recv: func(max int) (int, error) {
			return rx.ReadBatch(in[:min(max, len(in))])
		},
		unblock: func() { rx.SetReadDeadline(time.Now()) },
		close:   closeBoth(tx, rx),
	}
}

func init() {
	register(Suite{Group: "udp", Name: "UDP", Cases: udpCases, Notes: udpFloorNotes})
	register(Suite{Group: "udp", Name: "UDPThroughput", Cases: udpThroughputCases, Metric: "delivered-MB/s",
		AlsoChart: []string{"cpu-s/GiB"}, Notes: udpFloorNotes})
}

// udpCases are x/net internal/socket's BenchmarkUDP: each op sends n
// 64-byte datagrams and reads the n back, on one goroutine.
func udpCases(sc Scale) []Case {
	const size = 64
	batches := []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	switch sc {
	case Quick:
		batches = []int{1, 16, 512}
	case Default:
		batches = []int{1, 4, 16, 64, 512}
	}
	var cs []Case
	for _, impl := range udpImpls {
		for _, n := range batches {
			cs = append(cs, Case{fmt.Sprintf("impl=%s/n=%d", impl.name, n), func(b *testing.B) {
				p := impl.open(b, size, n)
				defer p.close()
				b.ReportAllocs()
				b.SetBytes(int64(n * size))
				watchdog := time.AfterFunc(time.Minute, p.unblock) // lost datagrams fail the run, never hang it
				defer watchdog.Stop()
				for b.Loop() {
					if err := p.send(n); err != nil {
						fatal(b, err)
					}
					for got := 0; got < n; {
						k, err := p.recv(n - got)
						if err != nil {
							fatalf(b, "received %d of %d: %v", got, n, err)
						}
						got += k
					}
				}
			}})
		}
	}
	if udpFloor.whyNot() != "" {
		return cs
	}
	for _, impl := range udpFloorImpls {
		for _, n := range batches {
			cs = append(cs, Case{fmt.Sprintf("impl=%s/n=%d", impl.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(n * size))
				runUDPFloor(b, impl.mode, "pingpong", size, n)
			}})
		}
	}
	return cs
}

// udpWindow is how far BenchmarkUDPThroughput's sender may run ahead of its
// receiver, in datagrams: the flow-control window any real protocol over
// UDP (QUIC, WireGuard's peers) keeps. It is far below what the socket
// buffers hold, so the benchmark measures the pipeline, not how much the
// kernel drops while a loaded machine deschedules the receiver.
const udpWindow = 4096

// udpThroughputCases run a sender goroutine and a receiver goroutine
// over loopback with 1400-byte datagrams: each op is one datagram sent, in
// batches of 128 (wireguard-go's IdealBatchSize) where the impl batches,
// and read back in batches of 128, at most udpWindow ahead of the
// receiver. It reports what arrived: delivered MB/s (payload bytes received
// over the time until the last arrived), delivered-frac, and the CPU time
// both ends spent per GiB delivered. The C impls (udp_floor.go) run the
// same flow in a process of their own. Lost datagrams
// are counted, never waited for: the sender stops waiting for credit after
// 50 ms without progress, and the receiver gives up 200 ms after the sender
// is done and nothing arrives.
func udpThroughputCases(Scale) []Case {
	var cs []Case
	for _, impl := range udpImpls {
		cs = append(cs, Case{"impl=" + impl.name, func(b *testing.B) { runUDPThroughput(b, impl) }})
	}
	if udpFloor.whyNot() != "" {
		return cs
	}
	for _, impl := range udpFloorImpls {
		cs = append(cs, Case{"impl=" + impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(udpTPSize)
			r := runUDPFloor(b, impl.mode, "stream", udpTPSize, udpTPBatch)
			reportThroughput(b, r.delivered, time.Duration(r.lastNs), r.cpuNs)
		}})
	}
	return cs
}

// The datagrams of BenchmarkUDPThroughput: their size, and how many each
// send and each read carries at most.
const udpTPSize, udpTPBatch = 1400, 128

// runUDPThroughput is BenchmarkUDPThroughput's case for a Go impl.
func runUDPThroughput(b *testing.B, impl udpImpl) {
	const size, batch = udpTPSize, udpTPBatch
	p := impl.open(b, size, batch)
	defer p.close()
	b.ReportAllocs()
	b.SetBytes(size)
	total := b.N
	var got atomic.Int64
	var last atomic.Int64 // UnixNano of the last arrival
	recvDone := make(chan error, 1)
	credit := make(chan struct{}, 1)
	b.ResetTimer()
	cpu0 := selfCPUNs()
	start := time.Now()
	go func() {
		for got.Load() < int64(total) {
			k, err := p.recv(batch)
			if err != nil {
				recvDone <- err
				return
			}
			got.Add(int64(k))
			last.Store(time.Now().UnixNano())
			select {
			case credit <- struct{}{}:
			default:
			}
		}
		recvDone <- nil
	}()
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendWindowed(p, total, batch, &got, credit) }()
	if err := <-sendErr; err != nil {
		p.unblock()
		<-recvDone
		fatal(b, err)
	}
	var rerr error
wait:
	for prev := int64(-1); ; {
		select {
		case rerr = <-recvDone:
			break wait
		case <-time.After(200 * time.Millisecond):
			if g := got.Load(); g == prev {
				p.unblock()
				rerr = <-recvDone
				break wait
			} else {
				prev = g
			}
		}
	}
	b.StopTimer()
	cpu := selfCPUNs() - cpu0
	if rerr != nil && !isStopErr(rerr) {
		fatal(b, rerr)
	}
	reportThroughput(b, got.Load(), time.Duration(last.Load()-start.UnixNano()), cpu)
}

// sendWindowed sends total datagrams through p, batch at a time, at most
// udpWindow ahead of got, the count received, woken by credit.
func sendWindowed(p udpPair, total, batch int, got *atomic.Int64, credit <-chan struct{}) error {
	stall := time.NewTimer(time.Hour)
	defer stall.Stop()
	for sent := 0; sent < total; {
		// Flow control: stay at most udpWindow datagrams ahead of the
		// receiver; after 50 ms without progress, count the rest as lost
		// and go on.
	wait:
		for int64(sent)-got.Load() > udpWindow {
			stall.Reset(50 * time.Millisecond) // Go 1.23 timers: no stale tick
			select {
			case <-credit:
			case <-stall.C:
				break wait
			}
		}
		k := min(batch, total-sent)
		if err := p.send(k); err != nil {
			return err
		}
		sent += k
	}
	return nil
}

// reportThroughput reports what a BenchmarkUDPThroughput run of b.N
// datagrams delivered, in elapsed time until the last arrived, and the CPU
// time the run cost (the process's, both ends; 0 if unknown).
func reportThroughput(b *testing.B, delivered int64, elapsed time.Duration, cpuNs int64) {
	bytes := float64(delivered * udpTPSize)
	if delivered == 0 || elapsed <= 0 {
		b.ReportMetric(0, "delivered-MB/s")
	} else {
		b.ReportMetric(bytes/1e6/elapsed.Seconds(), "delivered-MB/s")
	}
	b.ReportMetric(float64(delivered)/float64(b.N), "delivered-frac")
	if cpuNs > 0 && delivered > 0 {
		b.ReportMetric(float64(cpuNs)/1e9/(bytes/(1<<30)), "cpu-s/GiB")
	}
}

// isStopErr reports the error a receiver gets from unblock.
func isStopErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, errDeadline()) || isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
