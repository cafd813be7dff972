package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// adminRelay runs a relay with route r over targets, in this process (so
// that -race sees the admin API and the relay together), and its admin
// API on addr; it returns the relay and the admin address.
func adminRelay(t *testing.T, addr string, targets ...string) (*relay.Server, string) {
	t.Helper()
	r := relay.Route{Name: "r", Listen: relay.Addr{Network: "tcp", Address: "127.0.0.1:0"}}
	for _, a := range targets {
		r.Targets = append(r.Targets, relay.Target{Addr: relay.Addr{Network: "tcp", Address: a}, Weight: 1})
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs, err := relay.New(relay.Config{Routes: []relay.Route{r}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	a, err := startAdmin(addr, false, rs, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rs.Shutdown(ctx)
	})
	if strings.HasPrefix(addr, "unix://") {
		return rs, addr
	}
	return rs, a.ln.Addr().String()
}

// ctl runs zeroio ctl with args and returns its output.
func ctl(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runCtl(args, &out, &errb); code != 0 {
		t.Fatalf("zeroio ctl %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// TestAdminDrain is the admin API's acceptance: GET /routes names each
// route's targets with their state, and a target drained through it
// takes no new client while its connections go on.
func TestAdminDrain(t *testing.T) {
	a, b := echoServer(t, "tcp", "127.0.0.1:0"), echoServer(t, "tcp", "127.0.0.1:0")
	rs, admin := adminRelay(t, "127.0.0.1:0", a.Addr().String(), b.Addr().String())
	listen := rs.Addrs("r")[0].String()

	resp, err := http.Get("http://" + admin + "/routes")
	if err != nil {
		t.Fatal(err)
	}
	var routes struct {
		Routes []struct {
			Name    string
			Targets []struct{ Target, State string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&routes)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /routes: %v (%s)", err, resp.Header.Get("Content-Type"))
	}
	if len(routes.Routes) != 1 || routes.Routes[0].Name != "r" || len(routes.Routes[0].Targets) != 2 ||
		routes.Routes[0].Targets[0].Target != "tcp://"+a.Addr().String() || routes.Routes[0].Targets[0].State != "up" {
		t.Fatalf("GET /routes: %+v", routes)
	}

	// A client relayed to a, held through the drain.
	var held net.Conn
	for held == nil {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		ping(t, c)
		if rs.Stats().Routes[0].Targets[0].Active == 1 {
			held = c
		} else {
			c.Close()
		}
	}
	defer held.Close()

	if out := ctl(t, "--admin", admin, "drain", "r", a.Addr().String()); !strings.Contains(out, "draining (was enabled)") {
		t.Errorf("ctl drain: %q", out)
	}
	if out := ctl(t, "--admin", admin, "routes"); !strings.Contains(out, "tcp://"+a.Addr().String()+"  draining") {
		t.Errorf("ctl routes after the drain:\n%s", out)
	}
	before := rs.Stats().Routes[0].Targets[0].Connections
	for range 6 {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		ping(t, c)
		c.Close()
	}
	if got := rs.Stats().Routes[0].Targets[0].Connections; got != before {
		t.Errorf("the drained target took %d new clients", got-before)
	}
	ping(t, held) // its connection goes on

	// GET /conns shows the held stream; closing it ends the client.
	var conns struct {
		Conns []struct {
			ID             uint64
			Target, Client string
		}
	}
	if err := json.Unmarshal([]byte(ctl(t, "--admin", admin, "--json", "conns")), &conns); err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, c := range conns.Conns {
		if c.Client == held.LocalAddr().String() && c.Target == "tcp://"+a.Addr().String() {
			id = c.ID
		}
	}
	if id == 0 {
		t.Fatalf("GET /conns: no stream of the held client: %+v", conns)
	}
	ctl(t, "--admin", admin, "close", fmt.Sprint(id))
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Error("the closed connection's client read a byte")
	}
}

// TestAdminAPI covers the rest of the API over a Unix socket: paging
// the connections, weights, errors.
func TestAdminAPI(t *testing.T) {
	a := echoServer(t, "tcp", "127.0.0.1:0")
	sock := "unix://" + filepath.Join(t.TempDir(), "admin.sock")
	rs, admin := adminRelay(t, sock, a.Addr().String())
	for range 3 {
		c, err := net.Dial("tcp", rs.Addrs("r")[0].String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ping(t, c)
	}
	out := ctl(t, "--admin", admin, "conns", "--limit", "2")
	if n := strings.Count(out, "relaying"); n != 2 || !strings.Contains(out, "more: zeroio ctl conns --after") {
		t.Errorf("ctl conns --limit 2:\n%s", out)
	}
	if out := ctl(t, "--admin", admin, "weight", "r", a.Addr().String(), "5"); !strings.Contains(out, "weight 5 (was 1)") {
		t.Errorf("ctl weight: %q", out)
	}
	var errb bytes.Buffer
	for _, args := range [][]string{
		{"drain", "r", "127.0.0.1:1"},
		{"drain", "nope", a.Addr().String()},
		{"weight", "r", a.Addr().String(), "300"},
		{"close", "999999"},
		{"frobnicate"},
	} {
		errb.Reset()
		if code := runCtl(append([]string{"--admin", admin}, args...), io.Discard, &errb); code != 1 || errb.Len() == 0 {
			t.Errorf("zeroio ctl %v: exit %d, %q", args, code, errb.String())
		}
	}
}

// TestAdminAddress checks what --admin takes: loopback or a Unix socket,
// another address only with --admin-allow-remote.
func TestAdminAddress(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9901", false, true},
		{"[::1]:9901", false, true},
		{"localhost:9901", false, true},
		{"unix:///run/zeroio/admin.sock", false, true},
		{"0.0.0.0:9901", false, false},
		{"192.0.2.1:9901", false, false},
		{"0.0.0.0:9901", true, true},
		{":9901", false, false},
		{"unix://", false, false},
	} {
		_, _, err := adminListenAddr(tc.addr, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("admin %q (remote %v): %v", tc.addr, tc.remote, err)
		}
	}
}
