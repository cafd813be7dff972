package relay

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// bulk is a client that sends size random bytes through an echo route
// and checks by SHA-256 what comes back; it reads nothing until read is
// closed, so that the relay's buffers and pipes fill both ways.
type bulk struct {
	c    net.Conn
	data []byte
	err  chan error
}

func startBulk(c net.Conn, size int, seed uint64, read <-chan struct{}) *bulk {
	b := &bulk{c: c, data: make([]byte, size), err: make(chan error, 2)}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range b.data {
		b.data[i] = byte(rng.Uint32())
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	go func() {
		_, err := c.Write(b.data)
		if err == nil {
			err = closeWrite(c)
		}
		b.err <- err
	}()
	go func() {
		<-read
		h := sha256.New()
		n, err := io.Copy(h, c)
		if want := sha256.Sum256(b.data); err == nil && (n != int64(size) || !bytes.Equal(h.Sum(nil), want[:])) {
			err = fmt.Errorf("echo mismatch: %d bytes back of %d", n, size)
		}
		b.err <- err
	}()
	return b
}

func (b *bulk) wait() error {
	for range 2 {
		if err := <-b.err; err != nil {
			return err
		}
	}
	return nil
}

// receiverDiesAfterReady is a peer that reads a hand-over's state, says
// it is ready, and goes away.
func receiverDiesAfterReady(c *net.UnixConn) {
	for {
		h, _, fds, err := readFrame(c)
		closeFDs(fds)
		if err != nil || h.typ == frEnd {
			break
		}
	}
	writeFrame(c, frReady, nil, nil)
	c.Close()
}

// TestHandOverStreams: every stream of the event engine goes over
// whatever it is doing: idle, mid-transfer both ways with bytes in
// buffers and splice pipes, half-closed, behind a PROXY header, or in
// the middle of reading one; a failed hand-over before loses nothing
// either. Every byte arrives, in order.
func TestHandOverStreams(t *testing.T) {
	leakCheck(t)
	echoBE := startBackend(t, "tcp4", echo)
	proxyBE, proxied := proxyTarget(t)
	release := make(chan struct{})
	halfBE := startBackend(t, "tcp4", func(c net.Conn) {
		got, _ := io.ReadAll(c)
		<-release
		fmt.Fprintf(c, "got %q", got)
	})
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "e", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: echoBE.addr, IdleTimeout: time.Minute},
		{Name: "p", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: proxyBE.addr, AcceptProxy: true, SendProxy: 2},
		{Name: "h", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: halfBE.addr},
	}}
	a := startRelay(t, cfg)
	cfg = sameAddrs(cfg, a)

	idle := dialAddr(t, a.Addrs("e")[0])
	askEcho(t, idle, "idle")
	read := make(chan struct{})
	var bulks []*bulk
	for i := range 4 {
		bulks = append(bulks, startBulk(dialAddr(t, a.Addrs("e")[0]), 8<<20, uint64(i), read))
	}
	half := dialAddr(t, a.Addrs("h")[0])
	half.Write([]byte("hello"))
	closeWrite(half)
	src := netip.MustParseAddrPort("198.51.100.7:4242")
	hdr := proxyproto.AppendV1(nil, src, netip.MustParseAddrPort("203.0.113.1:443"))
	px := dialAddr(t, a.Addrs("p")[0])
	px.Write(hdr)
	askEcho(t, px, "proxied")
	if got := <-proxied; got != src {
		t.Fatalf("PROXY source %v", got)
	}
	partial := dialAddr(t, a.Addrs("p")[0])
	partial.Write(hdr[:10])
	waitFor(t, func() bool {
		_, pipes, _, _ := testEng(a).holding()
		return pipes > 0
	})

	ca, cb := unixPair(t)
	go receiverDiesAfterReady(cb)
	if err := a.HandOver(ca); err == nil {
		t.Fatal("HandOver to a receiver that died succeeded")
	}
	b := handOver(t, a, cfg)
	if n := a.Stats().Active; n != 0 {
		t.Errorf("old server: %d streams active", n)
	}
	if bufs, pipes, _, _ := testEng(a).holding(); bufs != 0 || pipes != 0 {
		t.Errorf("old server holds %d buffers, %d pipes", bufs, pipes)
	}
	shutdown(t, a)

	close(read)
	for i, bk := range bulks {
		if err := bk.wait(); err != nil {
			t.Errorf("bulk stream %d: %v", i, err)
		}
	}
	askEcho(t, idle, "still here")
	askEcho(t, px, "still proxied")
	close(release)
	half.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(half); err != nil || string(got) != `got "hello"` {
		t.Errorf("half-closed stream: %q, %v", got, err)
	}
	partial.Write(hdr[10:])
	askEcho(t, partial, "late header")
	if got := <-proxied; got != src {
		t.Errorf("PROXY source of the header read across the hand-over: %v", got)
	}
	for _, c := range []net.Conn{idle, half, px, partial} {
		c.Close()
	}
	for _, bk := range bulks {
		bk.c.Close()
	}
	waitFor(t, func() bool { return b.Stats().Active == 0 })
}

// TestHandOverTenTimes: streams relaying both ways at full speed, and
// new clients connecting all along, go through ten hand-overs in a row,
// back and forth between two processes' worth of Servers, with not a
// byte lost or a client refused.
func TestHandOverTenTimes(t *testing.T) {
	leakCheck(t)
	be := startBackend(t, "tcp4", echo)
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "e", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: be.addr},
	}}
	s := startRelay(t, cfg)
	cfg = sameAddrs(cfg, s)
	addr := s.Addrs("e")[0]
	open := make(chan struct{})
	close(open)
	var bulks []*bulk
	for i := range 6 {
		bulks = append(bulks, startBulk(dialAddr(t, addr), 32<<20, uint64(i), open))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	news := 0
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
			if err == nil {
				err = roundTrip(c, 1000, uint64(i))
				c.Close()
			}
			if err != nil {
				t.Errorf("new client %d: %v", i, err)
				return
			}
			news++
		}
	}()
	for range 10 {
		next := handOver(t, s, cfg)
		shutdown(t, s)
		s = next
	}
	close(stop)
	wg.Wait()
	for i, bk := range bulks {
		if err := bk.wait(); err != nil {
			t.Errorf("stream %d: %v", i, err)
		}
		bk.c.Close()
	}
	t.Logf("%d new clients relayed during the hand-overs", news)
}

// TestHandOverParkedAndHello: a client parked at its route's limit after
// its ClientHello chose the route, and one whose ClientHello is half
// read, go over with the bytes they sent: the new process parks the
// first until the stream holding the slot (gone over too) ends, and
// reads the rest of the second's hello; both then complete their TLS
// handshakes with the backend.
func TestHandOverParkedAndHello(t *testing.T) {
	leakCheck(t)
	be := startTLSBackend(t, false, "a.example")
	other := startBackend(t, "tcp4", echo)
	l := Addr{Network: "tcp", Address: freePort(t)}
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "a", Listen: l, Target: be.addr, SNI: []string{"a.example"}, MaxConns: 1},
		{Name: "d", Listen: l, Target: other.addr},
	}}
	a := startRelay(t, cfg)
	tcfg := &tls.Config{ServerName: "a.example", RootCAs: be.pool()}
	handshake := func(raw net.Conn) chan error {
		done := make(chan error, 1)
		go func() {
			raw.SetDeadline(time.Now().Add(20 * time.Second))
			c := tls.Client(raw, tcfg)
			err := c.Handshake()
			if err == nil {
				err = roundTrip(c, 1000, 1)
			}
			raw.Close()
			done <- err
		}()
		return done
	}
	holder := dialAddr(t, a.Addrs("a")[0])
	hc := tls.Client(holder, tcfg)
	if err := hc.Handshake(); err != nil {
		t.Fatal(err)
	}
	parked := handshake(dialAddr(t, a.Addrs("a")[0]))
	waitFor(t, func() bool { return routeOf(a, "a").parked.Load() == 1 })
	// A ClientHello cut in two: the relay holds its first bytes.
	var hello []byte
	rec := &recordConn{}
	tls.Client(rec, tcfg).Handshake()
	hello = rec.b.Bytes()
	split := dialAddr(t, a.Addrs("a")[0])
	split.Write(hello[:len(hello)/2])
	waitFor(t, func() bool { bufs, _, _, _ := testEng(a).holding(); return bufs > 0 })

	b := handOver(t, a, cfg)
	shutdown(t, a)
	// The loops take the streams in as soon as they can.
	st := routeOf(b, "a")
	waitFor(t, func() bool { return st.active.Load() == 1 && st.parked.Load() == 1 })
	holder.Close()
	if err := <-parked; err != nil {
		t.Errorf("parked client: %v", err)
	}
	split.Write(hello[len(hello)/2:])
	split.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(split, buf); err != nil || buf[0] != 22 { // a TLS handshake record: the ServerHello
		t.Errorf("client whose hello was read across the hand-over: %x, %v", buf, err)
	}
	split.Close()
	waitFor(t, func() bool { return b.Stats().Active == 0 })
}

// routeOf returns s's route name.
func routeOf(s *Server, name string) *route {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routes[name]
}

// recordConn is a net.Conn that records what is written to it and
// fails reads: a TLS client's first flight.
type recordConn struct {
	net.Conn
	b bytes.Buffer
}

func (c *recordConn) Write(p []byte) (int, error) { return c.b.Write(p) }
func (c *recordConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *recordConn) Close() error                { return nil }
func (c *recordConn) SetDeadline(time.Time) error { return nil }

// TestHandOverStreamsToGoroutineEngine: a receiver on the goroutine
// engine cannot take streams over; the hand-over fails and the sender's
// streams go on.
func TestHandOverStreamsToGoroutineEngine(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "e", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: be.addr},
	}}
	a := startRelay(t, cfg)
	c := dialAddr(t, a.Addrs("e")[0])
	askEcho(t, c, "before")
	cfg = sameAddrs(cfg, a)
	cfg.Engine = EngineGoroutine
	if _, err := tryHandOver(t, a, cfg); err == nil || !strings.Contains(err.Error(), "cannot take established streams") {
		t.Fatalf("hand-over to the goroutine engine: %v", err)
	}
	askEcho(t, c, "after")
	askEcho(t, dialAddr(t, a.Addrs("e")[0]), "new")
}

// TestHandOverPacedStream: a stream under a byte rate goes over with its
// rate and its bucket, and goes on paced in the new process; one under
// MaxDuration keeps its deadline.
func TestHandOverPacedStream(t *testing.T) {
	leakCheck(t)
	be := startBackend(t, "tcp4", echo)
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "e", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: be.addr, DownloadRate: 256 << 10},
		{Name: "m", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: be.addr, MaxDuration: 2 * time.Second},
	}}
	a := startRelay(t, cfg)
	cfg = sameAddrs(cfg, a)
	open := make(chan struct{})
	close(open)
	bk := startBulk(dialAddr(t, a.Addrs("e")[0]), 1<<20, 7, open)
	waitFor(t, func() bool { return routeOf(a, "e").st.pacedBytes.Load() > 0 })
	m := dialAddr(t, a.Addrs("m")[0])
	askEcho(t, m, "m")
	b := handOver(t, a, cfg)
	shutdown(t, a)
	if err := bk.wait(); err != nil {
		t.Fatalf("paced stream: %v", err)
	}
	if n := routeOf(b, "e").st.pacedBytes.Load(); n == 0 {
		t.Error("the new server did not pace the stream")
	}
	if !waitClosed(m, 10*time.Second) {
		t.Error("the stream under MaxDuration was not closed")
	}
	bk.c.Close()
	waitFor(t, func() bool { return b.Stats().Active == 0 })
}
