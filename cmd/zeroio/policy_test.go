package main

import (
	"bufio"
	"bytes"
	be "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests drive the built binary, as a user runs it, through the
// policies of a route: access lists, connection limits, idle and session
// timeouts, PROXY protocol with HAProxy on either side, and descriptor
// leaks after churn.

// freeAddr returns a loopback TCP address that was free a moment ago, for
// programs that cannot report the port they bound.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// refused reports whether the relay closed c without relaying: the read
// ends (EOF or reset) with no byte, well before the deadline.
func refused(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "ping")
	var b [4]byte
	n, err := c.Read(b[:])
	if n > 0 {
		return fmt.Errorf("relayed %q", b[:n])
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("connection left open: %v", err)
	}
	return nil
}

func TestRelayBinaryAccessAndLimits(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	backend6 := echoServer(t, "tcp", "[::1]:0").Addr().String()
	conf := writeConfig(t, `
routes:
  - {name: deny4, listen: "tcp://127.0.0.1:0", target: "tcp://%[1]s", deny: [127.0.0.1/32]}
  - {name: allow6, listen: "tcp://[::1]:0", target: "tcp://%[2]s", allow: ["::1/128"], deny: [127.0.0.0/8]}
  - {name: allowonly, listen: "tcp://127.0.0.1:0", target: "tcp://%[1]s", allow: [10.0.0.0/8]}
  - {name: limited, listen: "tcp://127.0.0.1:0", target: "tcp://%[1]s", max_conns: 2}
  - {name: perclient, listen: "tcp://127.0.0.1:0", target: "tcp://%[1]s", max_conns_per_client: 1}
`, backend, backend6)
	p := startProc(t, 5, "-c", conf)
	dial := func(t *testing.T, route string) net.Conn {
		t.Helper()
		addr := p.addr(t, route)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("acl", func(t *testing.T) {
		if err := refused(dial(t, "deny4")); err != nil {
			t.Errorf("deny4: a denied client: %v", err)
		}
		if err := refused(dial(t, "allowonly")); err != nil {
			t.Errorf("allowonly: a client outside the allow list: %v", err)
		}
		ping(t, dial(t, "allow6"))
		p.waitLog(t, "client denied", 2)
	})

	t.Run("max_conns", func(t *testing.T) {
		a, b := dial(t, "limited"), dial(t, "limited")
		ping(t, a)
		ping(t, b)
		// The third waits in the listen backlog, not dropped, and is
		// served once the relay sees a's close.
		third := dial(t, "limited")
		io.WriteString(third, "ping")
		a.Close()
		third.SetDeadline(time.Now().Add(10 * time.Second))
		var buf [4]byte
		if _, err := io.ReadFull(third, buf[:]); err != nil {
			t.Fatalf("third connection over max_conns 2, after a slot freed: %v", err)
		}
		ping(t, b)
	})

	t.Run("max_conns_per_client", func(t *testing.T) {
		a := dial(t, "perclient")
		ping(t, a)
		if err := refused(dial(t, "perclient")); err != nil {
			t.Errorf("second connection from one client: %v", err)
		}
		p.waitLog(t, "client over its connection limit", 1)
		ping(t, a)
	})
}

func TestRelayBinaryTimeouts(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	udpEcho := udpEchoServer(t)
	conf := writeConfig(t, `
routes:
  - {name: idle, listen: "tcp://127.0.0.1:0", target: "tcp://%s", idle_timeout: 400ms}
  - {name: udp, listen: "udp://127.0.0.1:0", target: "udp://%s", session_timeout: 300ms}
`, backend, udpEcho.LocalAddr())
	p := startProc(t, 2, "-c", conf)

	t.Run("idle", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr(t, "idle"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A stream that keeps moving for three times the idle timeout,
		// in 256 KiB bursts spliced through the relay, is never cut.
		go io.Copy(io.Discard, c)
		chunk := bytes.Repeat([]byte("z"), 256<<10)
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
			if _, err := c.Write(chunk); err != nil {
				t.Fatalf("an active stream was cut: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Then silence: the relay closes it.
		p.waitLog(t, "idle timeout", 1)
	})

	t.Run("udp_session_expiry", func(t *testing.T) {
		c, err := net.Dial("udp", p.addr(t, "udp"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echo := func() {
			t.Helper()
			buf := make([]byte, 64)
			for range 20 {
				c.Write([]byte("hi"))
				c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if n, err := c.Read(buf); err == nil && string(buf[:n]) == "hi" {
					return
				}
			}
			t.Fatal("no echo through the UDP route")
		}
		echo()
		p.waitLog(t, "UDP session expired", 1)
		echo()                         // a new session for the same client
		p.waitLog(t, "UDP session", 2) // logged before the first datagram went up
	})
}

// TestRelayBinaryChurnLeaks opens and closes many short connections, some
// reset by the client, and checks that the relay process's sockets come
// back to where they were and that no pipe stays in use. Idle pipes may
// stay pooled (closed when a GC drops them, as the standard library's
// are), as many as copies ran at once at most.
func TestRelayBinaryChurnLeaks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dir := t.TempDir()
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	unixBackend := filepath.Join(dir, "b.sock")
	echoServer(t, "unix", unixBackend)
	metrics := freeAddr(t)
	conf := writeConfig(t, `
metrics: %s
routes:
  - {name: t2t, listen: "tcp://127.0.0.1:0", target: "tcp://%s"}
  - {name: t2u, listen: "tcp://127.0.0.1:0", target: "unix://%s"}
`, metrics, backend, unixBackend)
	p := startProc(t, 2, "-c", conf)
	// fds counts the relay's sockets and pipes.
	fds := func() (sockets, pipes int) {
		dir := fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			l, _ := os.Readlink(filepath.Join(dir, e.Name()))
			switch {
			case strings.HasPrefix(l, "socket:"):
				sockets++
			case strings.HasPrefix(l, "pipe:"):
				pipes++
			}
		}
		return sockets, pipes
	}
	// The addresses are looked up here: addr may call t.Fatal, which only
	// the test's own goroutine may.
	addrs := map[string]string{"t2t": p.addr(t, "t2t"), "t2u": p.addr(t, "t2u")}
	churn := func(n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				route := []string{"t2t", "t2u"}[i%2]
				c, err := net.Dial("tcp", addrs[route])
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 3 {
				case 0: // a clean exchange
					if err := pingErr(c); err != nil {
						t.Error(err)
					}
					c.Close()
				case 1: // a reset in the middle of a stream
					io.WriteString(c, strings.Repeat("x", 100_000))
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				default: // a client that leaves at once
					c.Close()
				}
			}()
		}
		wg.Wait()
	}
	churn(50) // warm up: threads, pipes and buffers in the pools
	// The warm-up's relays have ended once the relay's descriptors stop
	// falling: two counts in a row alike.
	baseSockets, basePipes := fds()
	for settle := time.Now().Add(10 * time.Second); ; {
		time.Sleep(50 * time.Millisecond)
		n, pipes := fds()
		if n == baseSockets && pipes == basePipes {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("the relay's descriptors still change after the warm-up: %d sockets, %d pipes", n, pipes)
		}
		baseSockets, basePipes = n, pipes
	}
	churn(600)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, pipes := fds()
		inUse := metricValue(t, metrics, "zeroio_splice_pipes_in_use")
		// 32 clients at once, two copies each: at most 64 pipes pooled.
		if n <= baseSockets && inUse == 0 && pipes <= basePipes+2*64 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after churn the relay holds %d sockets (%d before), %d pipe descriptors (%d before), %v pipes in use",
				n, baseSockets, pipes, basePipes, inUse)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricValue reads one unlabelled sample from the relay's /metrics.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Close = true // no idle connection left in the relay to count
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// readProxyHeader reads a PROXY protocol v1 or v2 header with its own
// parser (not the relay's) and returns the source address it names.
func readProxyHeader(r *bufio.Reader) (netip.AddrPort, error) {
	sig := []byte("\r\n\r\n\x00\r\nQUIT\n")
	if b, err := r.Peek(len(sig)); err == nil && bytes.Equal(b, sig) {
		var h [16]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return netip.AddrPort{}, err
		}
		if h[12] != 0x21 {
			return netip.AddrPort{}, fmt.Errorf("v2 version/command byte %#x", h[12])
		}
		body := make([]byte, be.BigEndian.Uint16(h[14:]))
		if _, err := io.ReadFull(r, body); err != nil {
			return netip.AddrPort{}, err
		}
		switch h[13] {
		case 0x11: // TCP over IPv4
			if len(body) < 12 {
				return netip.AddrPort{}, errors.New("short v2 IPv4 block")
			}
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[:4])), be.BigEndian.Uint16(body[8:])), nil
		case 0x21: // TCP over IPv6
			if len(body) < 36 {
				return netip.AddrPort{}, errors.New("short v2 IPv6 block")
			}
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[:16])), be.BigEndian.Uint16(body[32:])), nil
		}
		return netip.AddrPort{}, fmt.Errorf("v2 family %#x", h[13])
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, err
	}
	f := strings.Fields(strings.TrimSuffix(line, "\r\n"))
	if len(f) != 6 || f[0] != "PROXY" {
		return netip.AddrPort{}, fmt.Errorf("v1 line %q", line)
	}
	ip, err := netip.ParseAddr(f[2])
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(f[4], 10, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

// proxyBackend is an echo server behind a PROXY protocol sender: it
// reports the source address of each header on the returned channel.
func proxyBackend(t *testing.T) (string, <-chan string) {
	srcs := make(chan string, 16)
	ln := serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(c)
		src, err := readProxyHeader(r)
		if err != nil {
			srcs <- "error: " + err.Error()
			return
		}
		srcs <- src.String()
		io.Copy(c, r)
	})
	return ln.Addr().String(), srcs
}

// TestRelayBinaryProxyProtocol puts HAProxy on both sides of the relay:
// HAProxy sends the relay a PROXY header, the relay sends one to another
// HAProxy listener that accepts it and passes it on to the backend. The
// client's address must survive every hop, in both versions each way.
func TestRelayBinaryProxyProtocol(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skipf("haproxy: %v", err)
	}
	backend, srcs := proxyBackend(t)
	hb1, hb2 := freeAddr(t), freeAddr(t) // HAProxy listeners that accept PROXY
	conf := writeConfig(t, `
routes:
  - {name: v2in-v1out, listen: "tcp://127.0.0.1:0", target: "tcp://%s", accept_proxy: true, trusted_proxies: [127.0.0.0/8], send_proxy: v1}
  - {name: v1in-v2out, listen: "tcp://127.0.0.1:0", target: "tcp://%s", accept_proxy: true, send_proxy: v2, deny: [192.0.2.0/24]}
`, hb1, hb2)
	// --no-check: the HAProxy behind the relay starts after it.
	p := startProc(t, 2, "-c", conf, "--no-check")
	z1, z2 := p.addr(t, "v2in-v1out"), p.addr(t, "v1in-v2out")
	ha1, ha2 := freeAddr(t), freeAddr(t) // HAProxy listeners in front
	hcfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	os.WriteFile(hcfg, fmt.Appendf(nil, `global
	maxconn 200
defaults
	mode tcp
	timeout connect 5s
	timeout client 30s
	timeout server 30s
listen front1
	bind %s
	server z %s send-proxy-v2
listen front2
	bind %s
	server z %s send-proxy
listen back1
	bind %s accept-proxy
	server b %s send-proxy-v2
listen back2
	bind %s accept-proxy
	server b %s send-proxy
`, ha1, z1, ha2, z2, hb1, backend, hb2, backend), 0o644)
	hp := exec.Command("haproxy", "-db", "-f", hcfg)
	var hlog bytes.Buffer
	hp.Stdout, hp.Stderr = &hlog, &hlog
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.Process.Kill()
		hp.Wait()
		if t.Failed() {
			t.Logf("haproxy: %s", hlog.String())
		}
	})
	probes := map[string]bool{} // the probes' addresses, which may reach the backend
	for _, a := range []string{ha1, ha2, hb1, hb2} {
		up := false
		for range 300 {
			if c, err := net.Dial("tcp", a); err == nil {
				probes[c.LocalAddr().String()] = true
				c.Close()
				up = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !up {
			t.Fatalf("haproxy is not listening on %s", a)
		}
	}
	// nextSrc returns the next source the backend reports, passing over
	// those of the probes above, which reach it through the relay and
	// back1 or back2 when HAProxy passes them on before they close.
	nextSrc := func(t *testing.T) string {
		t.Helper()
		for {
			select {
			case got := <-srcs:
				if !probes[got] {
					return got
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no header reached the backend")
			}
		}
	}

	through := func(t *testing.T, front string, seed uint64) {
		t.Helper()
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := roundTrip(c, 200_000+int(seed), seed); err != nil {
			t.Fatalf("via %s: %v", front, err)
		}
		if got, want := nextSrc(t), c.LocalAddr().String(); got != want {
			t.Errorf("via %s: the backend saw source %s, want the client's %s", front, got, want)
		}
	}
	t.Run("haproxy-v2-relay-v1-haproxy", func(t *testing.T) { through(t, ha1, 1) })
	t.Run("haproxy-v1-relay-v2-haproxy", func(t *testing.T) { through(t, ha2, 2) })

	// sendHeader dials a relay route as a client that speaks PROXY itself.
	sendHeader := func(t *testing.T, addr, header string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, header)
		return c
	}
	t.Run("acl-on-proxied-source", func(t *testing.T) {
		// The access list judges the address in the header, not the
		// socket's.
		if err := refused(sendHeader(t, z2, "PROXY TCP4 192.0.2.7 127.0.0.1 4444 80\r\n")); err != nil {
			t.Errorf("a denied proxied source: %v", err)
		}
		ping(t, sendHeader(t, z2, "PROXY TCP4 198.51.100.9 127.0.0.1 5555 80\r\n"))
		if got := nextSrc(t); got != "198.51.100.9:5555" {
			t.Errorf("backend saw %s, want 198.51.100.9:5555", got)
		}
	})
	t.Run("bad-header", func(t *testing.T) {
		if err := refused(sendHeader(t, z1, "GET / HTTP/1.0\r\n\r\n")); err != nil {
			t.Errorf("a client without a PROXY header: %v", err)
		}
		p.waitLog(t, "bad PROXY header", 1)
	})
}

// TestRelayBinaryServerHalfClose is the other direction of the half-close
// roundTrip tests: the backend finishes sending first (CloseWrite) and
// then still receives everything the client sends, through TCP-to-TCP,
// TCP-to-Unix and Unix-to-TCP routes.
func TestRelayBinaryServerHalfClose(t *testing.T) {
	dir := t.TempDir()
	const greeting = "the server is done talking"
	got := make(chan int64, 8)
	halfCloser := func(network, addr string) string {
		return serve(t, network, addr, func(c net.Conn) {
			c.SetDeadline(time.Now().Add(30 * time.Second))
			io.WriteString(c, greeting)
			c.(interface{ CloseWrite() error }).CloseWrite()
			n, _ := io.Copy(io.Discard, c)
			got <- n
		}).Addr().String()
	}
	tcpBackend := halfCloser("tcp", "127.0.0.1:0")
	unixBackend := halfCloser("unix", filepath.Join(dir, "b.sock"))
	unixListen := filepath.Join(dir, "l.sock")
	conf := writeConfig(t, `
routes:
  - {name: t2t, listen: "tcp://127.0.0.1:0", target: "tcp://%[1]s"}
  - {name: t2u, listen: "tcp://127.0.0.1:0", target: "unix://%[2]s"}
  - {name: u2t, listen: "unix://%[3]s", target: "tcp://%[1]s"}
`, tcpBackend, unixBackend, unixListen)
	// --no-check: the start-up reachability probe would be one more
	// connection for the backends to count.
	p := startProc(t, 3, "-c", conf, "--no-check")
	for _, route := range []string{"t2t", "t2u", "u2t"} {
		t.Run(route, func(t *testing.T) {
			network := "tcp"
			if route == "u2t" {
				network = "unix"
			}
			c, err := net.Dial(network, p.addr(t, route))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			b, err := io.ReadAll(c) // ends at the server's half-close
			if err != nil || string(b) != greeting {
				t.Fatalf("read %q, %v; want %q then EOF", b, err, greeting)
			}
			const size = 3 << 20 // long enough to splice, after the EOF
			if _, err := c.Write(bytes.Repeat([]byte("u"), size)); err != nil {
				t.Fatalf("write after the server's half-close: %v", err)
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			select {
			case n := <-got:
				if n != size {
					t.Fatalf("server received %d bytes, want %d", n, size)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("server never saw the client's EOF")
			}
		})
	}
}
