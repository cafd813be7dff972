//go:build linux

package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestDescriptorLimit: 300 clients that hold their connections against a
// relay limited to 128 descriptors (a child under ulimit -n). The relay
// stops accepting at the budget its limit allows, the others wait in the
// listen backlog: all 300 are served, none is reset, and the log has a
// handful of lines, not one per client.
func TestDescriptorLimit(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	p := startProcUnder(t, []string{"sh", "-c", `ulimit -n 128 && exec "$@"`, "sh"}, 1,
		"--log-level", "info", "tcp://127.0.0.1:0", "tcp://"+backend)
	addr := p.addr(t, "tcp://127.0.0.1:0")
	const clients = 300
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.WriteString(c, "hello"); err != nil {
				errs <- err
				return
			}
			var b [5]byte
			if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "hello" {
				errs <- errors.Join(err, errors.New("client "+string(rune('0'+i%10))+": no echo"))
				return
			}
			time.Sleep(300 * time.Millisecond) // hold it
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n < 5 {
			t.Error(err)
		}
		n++
	}
	if n > 0 {
		t.Fatalf("%d of %d clients failed", n, clients)
	}
	p.mu.Lock()
	lines := len(p.lines)
	p.mu.Unlock()
	if lines > 10 {
		t.Errorf("%d log lines for %d clients", lines, clients)
	}
}
