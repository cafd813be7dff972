package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprof starts a relay with --pprof on an ephemeral loopback port and
// fetches a goroutine profile and the index from it.
func TestPprof(t *testing.T) {
	backend := echoServer(t, "tcp", "127.0.0.1:0").Addr().String()
	p := startProc(t, 1, "--pprof", "127.0.0.1:0", "tcp://127.0.0.1:0", "tcp://"+backend)
	p.waitLog(t, "pprof", 1)
	url, _ := p.logs("pprof")[0]["url"].(string)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("pprof url %q", url)
	}
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return body
	}
	if body := get(""); !bytes.Contains(body, []byte("goroutine")) {
		t.Errorf("index lacks the goroutine profile:\n%s", body)
	}
	if body := get("goroutine?debug=1"); !bytes.Contains(body, []byte("runRelay")) {
		t.Errorf("goroutine profile lacks runRelay:\n%s", body)
	}
}

func TestPprofBadAddress(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{":6060", "has no host"},
		{"127.0.0.1:notaport", "bad port"},
		{"localhost", "want host:port"},
	} {
		var out, errOut bytes.Buffer
		code := run([]string{"relay", "--pprof", c.addr, "--check-config", "tcp://127.0.0.1:0", "tcp://127.0.0.1:1"}, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "pprof address") || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("--pprof %s: exit %d, stderr %q", c.addr, code, errOut.String())
		}
	}
}
