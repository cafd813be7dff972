package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// socatBackend runs socat on addr answering each connection with name
// and a newline; it is killed at cleanup or by the returned function.
func socatBackend(t *testing.T, addr, name string) (kill func()) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "socat", fmt.Sprintf("TCP-LISTEN:%s,bind=%s,reuseaddr,fork", port, host), "SYSTEM:echo "+name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	kill = func() {
		cancel()
		<-done
	}
	t.Cleanup(kill)
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return kill
		}
		if i == 100 {
			t.Fatalf("socat on %s never listened: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// whoAnswers connects through the relay and returns the backend's name.
func whoAnswers(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read: %w (got %q)", err, line)
	}
	return strings.TrimSpace(line), nil
}

// TestThreeTargetsOneDown is the judged scenario with real programs: three
// socat targets of which one is down at start. The relay starts, spreads
// clients over the two live ones, and after one of those is killed every
// following client is still served. Each connection is logged.
func TestThreeTargetsOneDown(t *testing.T) {
	if _, err := exec.LookPath("socat"); err != nil {
		t.Skip("socat not installed")
	}
	a1, a2, a3 := freeAddr(t), freeAddr(t), freeAddr(t)
	kill1 := socatBackend(t, a1, "one")
	socatBackend(t, a2, "two")
	// a3: nobody listens.
	maddr := freeAddr(t)
	p := startProc(t, 1, "--conn-log", "info", "--dial-timeout", "2s", "--metrics", maddr, "tcp://127.0.0.1:0", "tcp://"+a1, "tcp://"+a2, "tcp://"+a3)
	addr := p.addr(t, "tcp://127.0.0.1:0")
	count := map[string]int{}
	for i := range 30 {
		who, err := whoAnswers(addr)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		count[who]++
	}
	if count["one"] == 0 || count["two"] == 0 || len(count) != 2 {
		t.Fatalf("answers %v: want both live targets", count)
	}
	kill1()
	for i := range 30 {
		who, err := whoAnswers(addr)
		if err != nil {
			t.Fatalf("client %d after a target was killed: %v", i, err)
		}
		if who != "two" {
			t.Fatalf("client %d answered by %q after it was killed", i, who)
		}
	}
	p.waitLog(t, "connection", 60)
	for _, l := range p.logs("connection") {
		if l["target"] == "tcp://"+a3 {
			t.Fatalf("a connection logged as relayed to the dead target: %v", l)
		}
		if l["end"] == "" || l["client"] == "" || l["route"] == "" {
			t.Fatalf("connection line lacks a field: %v", l)
		}
	}
	if len(p.logs("target down")) < 2 {
		t.Fatal("the two dead targets were not each logged down")
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`zeroio_relay_target_up{route="tcp://127.0.0.1:0",target="tcp://%s"} 0`, a1),
		fmt.Sprintf(`zeroio_relay_target_up{route="tcp://127.0.0.1:0",target="tcp://%s"} 1`, a2),
		fmt.Sprintf(`zeroio_relay_target_up{route="tcp://127.0.0.1:0",target="tcp://%s"} 0`, a3),
		fmt.Sprintf(`zeroio_relay_target_connections_total{route="tcp://127.0.0.1:0",target="tcp://%s"} 0`, a3),
		fmt.Sprintf(`zeroio_relay_target_bytes_total{direction="down",route="tcp://127.0.0.1:0",target="tcp://%s"}`, a2),
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// nameServer is a TCP backend that sends its name and a newline, then
// echoes.
func nameServer(t *testing.T, name string) string {
	t.Helper()
	ln := serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		io.WriteString(c, name+"\n")
		io.Copy(c, c)
	})
	return ln.Addr().String()
}

// TestReloadTargets: SIGHUP adds, removes and reweights a route's
// targets; a connection to a removed target goes on undisturbed.
func TestReloadTargets(t *testing.T) {
	a, b, c := nameServer(t, "a"), nameServer(t, "b"), nameServer(t, "c")
	conf := writeConfig(t, "routes:\n  - {name: r, listen: tcp://127.0.0.1:0, targets: [tcp://%s]}\n", a)
	p := startProc(t, 1, "-c", conf)
	addr := p.addr(t, "r")
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(held)
	if line, err := rd.ReadString('\n'); err != nil || line != "a\n" {
		t.Fatalf("before the reload: %q %v", line, err)
	}
	// a removed; b and c weighted 3 to 1, in the file's other form.
	os.WriteFile(conf, fmt.Appendf(nil, "routes:\n  - name: r\n    listen: tcp://127.0.0.1:0\n    targets:\n      - {url: tcp://%s, weight: 3}\n      - tcp://%s\n", b, c), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reloaded", 1)
	count := map[string]int{}
	for range 8 {
		who, err := whoAnswers(addr)
		if err != nil {
			t.Fatal(err)
		}
		count[who]++
	}
	if count["b"] != 6 || count["c"] != 2 {
		t.Fatalf("after the reload: %v, want b 6 and c 2", count)
	}
	io.WriteString(held, "still here\n")
	if line, err := rd.ReadString('\n'); err != nil || line != "still here\n" {
		t.Fatalf("connection to the removed target: %q %v", line, err)
	}
}
