package relay

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seqTarget is a UDP echo target that records which numbered datagrams
// (an 8-byte sequence number each) it received.
type seqTarget struct {
	c    *net.UDPConn
	mu   sync.Mutex
	seen map[uint64]bool
}

func newSeqTarget(t *testing.T) *seqTarget {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(4 << 20)
	st := &seqTarget{c: c, seen: map[uint64]bool{}}
	serveUDP(t, c, func(in []byte) []byte {
		if len(in) == 8 {
			st.mu.Lock()
			st.seen[binary.BigEndian.Uint64(in)] = true
			st.mu.Unlock()
		}
		return in
	})
	return st
}

func (st *seqTarget) missing(seqs []uint64) []uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []uint64
	for _, q := range seqs {
		if !st.seen[q] {
			out = append(out, q)
		}
	}
	return out
}

// TestUDPRebindLosesNothing sends numbered datagrams from several clients
// through a UDP route while 20 reloads replace or resize its listening
// sockets, and checks that the target received every one. The clients
// keep a bounded number in flight, so that no datagram is dropped for
// want of buffer space on loopback. When the route's address stays
// (workers 1 <-> 2), its sessions stay too, so every echo comes back as
// well; a route that moves (a new socket on the same address) ends its
// sessions, and the echoes in flight then may not.
func TestUDPRebindLosesNothing(t *testing.T) {
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name    string
		echoes  bool
		refused bool // each reload also has a route that cannot bind: all undone
		next    func(i int, r *Route)
	}{
		{"workers", true, false, func(i int, r *Route) { r.Workers = 1 + i%2 }},
		{"workers-refused", true, true, func(i int, r *Route) { r.Workers = 2 }},
		// The same sockets, named differently: kept.
		{"network-workers", true, false, func(i int, r *Route) {
			r.Listen.Network = []string{"udp", "udp4"}[i%2]
			r.Workers = 1 + i%2
		}},
		// New sockets beside the old ones on the port, which outrank
		// them until they stop (a specific address over the wildcard).
		{"wildcard", false, false, func(i int, r *Route) {
			r.Listen.Address = net.JoinHostPort([]string{"127.0.0.1", "0.0.0.0"}[i%2], strconv.Itoa(r.Listen.port()))
		}},
		{"wildcard-refused", true, true, func(i int, r *Route) {
			r.Listen.Address = net.JoinHostPort("0.0.0.0", strconv.Itoa(r.Listen.port()))
		}},
		// Another route takes the address over in the reload that
		// removes the route holding it: its sockets join the old ones'
		// group, as a moving route's do.
		{"takeover", false, false, func(i int, r *Route) { r.Name = []string{"u", "w"}[i%2] }},
		{"takeover-workers", false, false, func(i int, r *Route) {
			r.Name = []string{"u", "w"}[i%2]
			r.Workers = 1 + i%3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			target := newSeqTarget(t)
			taken, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			base := func(addr string) Config {
				return udpRoute0(addr, target.c.LocalAddr(), func(r *Route) { r.UDPBuffer = 4 << 20 })
			}
			ra := freeUDPPort(t)
			s := startRelay(t, base(ra.String()))

			const (
				clients = 4
				window  = 32      // datagrams a client has in flight at most
				most    = 100_000 // per client: the loop's bound
			)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			sent := make([][]uint64, clients)
			nsent := make([]atomic.Int64, clients)
			var marks [][clients]int64
			lostEchoes := make([]int, clients)
			errs := make(chan error, clients)
			for ci := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.DialUDP("udp4", nil, ra)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					c.SetReadBuffer(4 << 20)
					var got int
					buf := make([]byte, 64)
					read := func(d time.Duration) bool {
						c.SetReadDeadline(time.Now().Add(d))
						if _, err := c.Read(buf); err != nil {
							return false
						}
						got++
						return true
					}
					deadline := time.Now().Add(60 * time.Second) // hang guard
				send:
					for i := range most {
						select {
						case <-stop:
							break send
						default:
						}
						if time.Now().After(deadline) {
							break
						}
						for len(sent[ci])-got >= window {
							// An echo may be lost when a moving route
							// ends its session; the window then
							// shrinks by one, and a short wait
							// lets the loop go on.
							if !read(2 * time.Second) {
								got++
							}
						}
						q := uint64(ci)<<32 | uint64(i)
						var b [8]byte
						binary.BigEndian.PutUint64(b[:], q)
						if _, err := c.Write(b[:]); err != nil {
							errs <- fmt.Errorf("client %d, datagram %d: %v", ci, i, err)
							return
						}
						sent[ci] = append(sent[ci], q)
						nsent[ci].Store(int64(i + 1))
					}
					for got < len(sent[ci]) && read(2*time.Second) {
					}
					lostEchoes[ci] = len(sent[ci]) - got
				}()
			}
			cfg := base(ra.String())
			for i := range 20 {
				next := cfg
				next.Routes = []Route{cfg.Routes[0]}
				tc.next(i+1, &next.Routes[0])
				if tc.refused {
					bad := next.Routes[0]
					bad.Name, bad.Listen = "v", Addr{"udp", taken.LocalAddr().String()}
					next.Routes = append(next.Routes, bad)
				}
				var mk [clients]int64
				for ci := range clients {
					mk[ci] = nsent[ci].Load()
				}
				marks = append(marks, mk)
				if err := s.Update(next); (err != nil) != tc.refused {
					t.Fatalf("reload %d: %v", i, err)
				}
				time.Sleep(20 * time.Millisecond) // let datagrams flow between reloads
			}
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			total := 0
			for ci := range clients {
				total += len(sent[ci])
				if m := target.missing(sent[ci]); len(m) > 0 {
					t.Errorf("client %d: %d of %d datagrams never reached the target (first %#x)", ci, len(m), len(sent[ci]), m[0])
					for k, mk := range marks {
						t.Logf("reload %d began at seq %d", k, mk[ci])
					}
				}
				if tc.echoes && lostEchoes[ci] > 0 {
					t.Errorf("client %d: %d of %d echoes lost", ci, lostEchoes[ci], len(sent[ci]))
				}
			}
			st := s.Stats().Routes[0]
			t.Logf("%d datagrams over 20 reloads; drops: limit %d, write %d, truncated %d", total, st.DropsSessionLimit, st.DropsWriteError, st.DropsTruncated)
			if total < 20*clients {
				t.Fatalf("only %d datagrams sent", total)
			}
		})
	}
}

// freeUDPPort returns a loopback address whose UDP port was free a moment
// ago, so that a route's config names the port it binds.
func freeUDPPort(t *testing.T) *net.UDPAddr {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr)
}

// TestUDPMoveLeavesAddressToAnother: a reload in which a UDP route moves
// to another port while a route of another name takes its address over
// (a new route, or one that swaps addresses with it) loses no datagram
// sent to the address. The other route's sockets join the old ones'
// SO_REUSEPORT group, so the old ones must be steered off before they
// stop, as when a route of the same name takes the address.
func TestUDPMoveLeavesAddressToAnother(t *testing.T) {
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name string
		swap bool // w listens elsewhere before, and u moves there
	}{{"takeover", false}, {"swap", true}} {
		t.Run(tc.name, func(t *testing.T) {
			testUDPMoveLeavesAddressToAnother(t, tc.swap)
		})
	}
}

func testUDPMoveLeavesAddressToAnother(t *testing.T, swap bool) {
	leakCheck(t)
	target := newSeqTarget(t)
	ra, elsewhere := freeUDPPort(t), freeUDPPort(t)
	cfg := func(moved bool) Config {
		u := udpRoute0(ra.String(), target.c.LocalAddr(), func(r *Route) { r.UDPBuffer = 4 << 20 }).Routes[0]
		w := u
		w.Name = "w"
		switch {
		case moved:
			u.Listen.Address = elsewhere.String()
		case swap:
			w.Listen.Address = elsewhere.String()
		default:
			return Config{Routes: []Route{u}}
		}
		return Config{Routes: []Route{u, w}}
	}
	s := startRelay(t, cfg(false))
	stop := seqClients(t, "udp4", ra, 4)
	for i := range 20 {
		time.Sleep(20 * time.Millisecond) // let datagrams flow between reloads
		if err := s.Update(cfg(i%2 == 0)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	target.check(t, stop())
}

// TestUDPDualStackToV6OnlyLosesNothing: a route that moves from a
// dual-stack socket on [::] to an IPv6-only one on the same address, or
// back, loses no IPv6 datagram. The two sockets share the address but
// not a SO_REUSEPORT group (the kernel groups only sockets alike in
// IPV6_V6ONLY), and a lone first socket has no group the relay could
// steer: the old sockets must still leave the kernel's choice before
// they stop, as sockets of another group on the port do.
func TestUDPDualStackToV6OnlyLosesNothing(t *testing.T) {
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	probe, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil {
		t.Skipf("no IPv6 here: %v", err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	target := newSeqTarget(t)
	cfg := func(network string) Config {
		return Config{Routes: []Route{{Name: "u", Listen: Addr{network, net.JoinHostPort("::", strconv.Itoa(port))},
			Target: Addr{"udp", target.c.LocalAddr().String()}, UDPBuffer: 4 << 20}}}
	}
	// Each round starts a relay afresh, so that each has a lone first
	// socket.
	for round := range 5 {
		t.Run(fmt.Sprint("round=", round), func(t *testing.T) {
			leakCheck(t)
			s := startRelay(t, cfg("udp"))
			ra := &net.UDPAddr{IP: net.IPv6loopback, Port: port}
			// Idle sessions make the old route's stop take longer,
			// and so would a loss show.
			for range 200 {
				c, err := net.DialUDP("udp6", nil, ra)
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte("idle"))
				c.Close()
			}
			stop := seqClients(t, "udp6", ra, 4)
			for i, network := range []string{"udp6", "udp", "udp6"} {
				time.Sleep(20 * time.Millisecond) // let datagrams flow between reloads
				if err := s.Update(cfg(network)); err != nil {
					t.Fatalf("reload %d: %v", i, err)
				}
			}
			target.check(t, stop())
		})
	}
}

// TestUDPReloadUndoneLosesNothing: a reload that would move a UDP route
// from the wildcard address to a specific one of its port is refused
// (another route cannot bind), and loses no datagram. Until the reload
// is undone the new socket, which the kernel prefers to the wildcard
// one, takes the clients' datagrams; it must leave the kernel's choice
// before it stops, or those that reach it between its drain and its
// close are lost.
func TestUDPReloadUndoneLosesNothing(t *testing.T) {
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	leakCheck(t)
	target := newSeqTarget(t)
	taken, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ra := freeUDPPort(t)
	cfg := func(host string) Config {
		return udpRoute0(net.JoinHostPort(host, strconv.Itoa(ra.Port)), target.c.LocalAddr(), func(r *Route) { r.UDPBuffer = 4 << 20 })
	}
	s := startRelay(t, cfg("0.0.0.0"))
	stop := seqClients(t, "udp4", ra, 8)
	for i := range 30 {
		time.Sleep(20 * time.Millisecond) // let datagrams flow between reloads
		next := cfg("127.0.0.1")
		bad := next.Routes[0]
		bad.Name, bad.Listen = "v", Addr{"udp", taken.LocalAddr().String()}
		next.Routes = append(next.Routes, bad)
		if err := s.Update(next); err == nil {
			t.Fatalf("reload %d with an unbindable route applied", i)
		}
	}
	target.check(t, stop())
}

// seqClients starts clients that send numbered datagrams (8 bytes each,
// the client's index in the high 32 bits) to ra from network sockets,
// each keeping at most 32 in flight, until the function it returns is
// called; that returns what each client sent.
func seqClients(t *testing.T, network string, ra *net.UDPAddr, clients int) func() [][]uint64 {
	const (
		window = 32      // datagrams a client has in flight at most
		most   = 100_000 // per client: the loop's bound
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sent := make([][]uint64, clients)
	errs := make(chan error, clients)
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialUDP(network, nil, ra)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetReadBuffer(4 << 20)
			buf := make([]byte, 64)
			got := 0
			deadline := time.Now().Add(60 * time.Second) // hang guard
			for i := range most {
				select {
				case <-stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				for len(sent[ci])-got >= window {
					// Echoes in flight when a session ends are
					// lost: a short wait, and the loop goes on.
					c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
					c.Read(buf)
					got++
				}
				q := uint64(ci)<<32 | uint64(i)
				var b [8]byte
				binary.BigEndian.PutUint64(b[:], q)
				if _, err := c.Write(b[:]); err != nil {
					errs <- fmt.Errorf("client %d, datagram %d: %v", ci, i, err)
					return
				}
				sent[ci] = append(sent[ci], q)
			}
		}()
	}
	return func() [][]uint64 {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return sent
	}
}

// check fails t for each client of sent whose datagrams did not all
// reach the target.
func (st *seqTarget) check(t *testing.T, sent [][]uint64) {
	t.Helper()
	// What the relay read has reached the target by the time the last
	// reload returned; the clients' last datagrams may still be on
	// their way: wait for them, 5 s at most.
	arrived := func() bool {
		for _, seqs := range sent {
			if len(st.missing(seqs)) > 0 {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(5 * time.Second); !arrived() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	for ci := range sent {
		if m := st.missing(sent[ci]); len(m) > 0 {
			t.Errorf("client %d: %d of %d datagrams never reached the target (first %#x)", ci, len(m), len(sent[ci]), m[0])
		}
	}
}

// TestUDPReloadAllOrNothing: a reload with a UDP route that cannot bind
// (its port taken by another program) is refused whole; the running
// routes keep their sockets, sessions and settings.
func TestUDPReloadAllOrNothing(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	taken, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ra := freeUDPPort(t)
	cfg := udpRoute0(ra.String(), e.LocalAddr(), nil)
	s := startRelay(t, cfg)
	c, err := net.DialUDP("udp4", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func() {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("echo: %q, %v", buf[:n], err)
		}
	}
	roundTrip()
	next := udpRoute0(ra.String(), e.LocalAddr(), func(r *Route) { r.Workers = 2 })
	bad := next.Routes[0]
	bad.Name, bad.Listen.Address, bad.Workers = "v", taken.LocalAddr().String(), 1
	next.Routes = append(next.Routes, bad)
	if err := s.Update(next); err == nil {
		t.Fatal("reload with an unbindable UDP route applied")
	} else if !strings.Contains(err.Error(), taken.LocalAddr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Update: %v; want an error naming %s, in use", err, taken.LocalAddr())
	}
	if as := s.Addrs("u"); len(as) != 1 {
		t.Fatalf("route u has %d sockets after a refused reload, want 1", len(as))
	}
	if s.Addrs("v") != nil {
		t.Fatal("route v exists after a refused reload")
	}
	roundTrip()
	if st := s.Stats().Routes[0]; st.SessionsTotal != 1 {
		t.Fatalf("%d sessions opened, want 1 kept over the refused reload", st.SessionsTotal)
	}
}
