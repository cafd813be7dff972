package relay

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHandOverUDPSessions: a UDP session goes over with its socket to
// the target, so its target sees the same peer before and after and
// its client's datagrams and replies flow throughout, none lost; a QUIC
// session's connection IDs go with it, so a client that moves after the
// hand-over still reaches its target.
func TestHandOverUDPSessions(t *testing.T) {
	leakCheck(t)
	who, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var peersMu sync.Mutex
	peers := map[string]bool{} // the relay's sockets the target hears from
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := who.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			peersMu.Lock()
			peers[from.String()] = true
			peersMu.Unlock()
			who.WriteToUDPAddrPort([]byte(fmt.Sprintf("%s from ?", buf[:n])), from)
		}
	}()
	t.Cleanup(func() { who.Close() })
	idA, idB := []byte("serverAA"), []byte("serverBB")
	qa, qb := quicTarget(t, idA), quicTarget(t, idB)
	cfg := Config{Engine: EngineEvent, Routes: []Route{
		{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: Addr{"udp", who.LocalAddr().String()}},
		{Name: "q", Listen: Addr{"udp", "127.0.0.1:0"},
			Targets: []Target{{Addr: Addr{"udp", qa.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", qb.LocalAddr().String()}, Weight: 1}}},
	}}
	a := startRelay(t, cfg)
	cfg = sameAddrs(cfg, a)
	c := dialUDP(t, a.Addrs("u")[0].(*net.UDPAddr))
	if got := exchange(t, c, []byte("0")); string(got) != "0 from ?" {
		t.Fatalf("reply %q", got)
	}
	qc := dialUDP(t, a.Addrs("q")[0].(*net.UDPAddr))
	hs := exchange(t, qc, quicLong(0, []byte("original"), []byte("client01"), make([]byte, 1200)))
	server := idA
	if bytes.Contains(hs, idB) {
		server = idB
	}

	// Ping-pong on the session all through the hand-over.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var lost, sent atomic.Int64
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := fmt.Sprint(i)
			c.Write([]byte(msg))
			sent.Add(1)
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != msg+" from ?" {
				lost.Add(1)
			}
		}
	}()
	waitFor(t, func() bool { return sent.Load() > 50 })
	b := handOver(t, a, cfg)
	shutdown(t, a)
	n := sent.Load()
	waitFor(t, func() bool { return sent.Load() > n+50 })
	close(stop)
	wg.Wait()
	if lost.Load() > 0 {
		t.Errorf("%d of %d datagrams lost", lost.Load(), sent.Load())
	}
	peersMu.Lock()
	if len(peers) != 1 {
		t.Errorf("the target heard the client's session from %d sockets, want one: %v", len(peers), peers)
	}
	peersMu.Unlock()
	st := b.Stats().Routes
	for _, r := range st {
		if r.Sessions != 1 {
			t.Errorf("route %s: %d sessions in the new server, want 1", r.Name, r.Sessions)
		}
	}
	moved := dialUDP(t, b.Addrs("q")[0].(*net.UDPAddr)) // the QUIC client, rebound
	got := exchange(t, moved, quicShort(server, "m"))
	if want := append(append([]byte(nil), server...), ":m"...); !bytes.Equal(got, want) {
		t.Errorf("QUIC client that moved after the hand-over: reply %q, want %q", got, want)
	}
}

// TestHandOverSharedUDPSessions: the sessions of routes that share one
// UDP port, chosen by their clients' QUIC ClientHello, go over too: a
// client that sends no hello after the hand-over (a short-header packet)
// still reaches its route's target, from the same session socket.
func TestHandOverSharedUDPSessions(t *testing.T) {
	leakCheck(t)
	ta, tb := newRecTarget(t, "A"), newRecTarget(t, "B")
	la := freeUDPPort(t).String()
	cfg := Config{Routes: []Route{sniRoute("a", ta, []string{"a.example"}, nil), sniRoute("b", tb, []string{"b.example"}, nil)}}
	for i := range cfg.Routes {
		cfg.Routes[i].Listen.Address = la
	}
	a := startRelay(t, cfg)
	ra := a.Addrs("a")[0].(*net.UDPAddr)
	before := map[string]string{}
	clients := map[string]*net.UDPConn{}
	for _, name := range []string{"a.example", "b.example"} {
		c := dialUDP(t, ra)
		clients[name] = c
		before[name] = sendAll(t, c, quicInitials(t, 1, name, nil, 2))
	}
	if !strings.HasPrefix(before["a.example"], "A:") || !strings.HasPrefix(before["b.example"], "B:") {
		t.Fatalf("before the hand-over: %v", before)
	}
	b := handOver(t, a, cfg)
	shutdown(t, a)
	for name, c := range clients {
		if got := sendAll(t, c, [][]byte{quicShort([]byte("whatever"), "x")}); got != before[name] {
			t.Errorf("%s after the hand-over: reply %q, want %q as before", name, got, before[name])
		}
	}
	waitFor(t, func() bool {
		st := b.Stats().Routes
		return len(st) == 2 && st[0].PacketsUp > 0 && st[1].PacketsUp > 0
	})
	for _, r := range b.Stats().Routes {
		if r.Sessions != 1 {
			t.Errorf("route %s: %d sessions in the new server, want 1", r.Name, r.Sessions)
		}
	}
}
