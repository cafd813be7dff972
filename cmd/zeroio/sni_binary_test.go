package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpsBackend is an HTTPS server (HTTP/1.1 and h2) with a self-signed
// certificate of its own (named name, for the DNS names given), answering every request with that name; its
// certificate is also written to a PEM file for curl and openssl.
type httpsBackend struct {
	name, addr, pemFile string
	cert                *x509.Certificate
}

func startHTTPSBackend(t *testing.T, name string, dns ...string) *httpsBackend {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     dns,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	b := &httpsBackend{name: name, pemFile: filepath.Join(t.TempDir(), name+".pem")}
	b.cert, _ = x509.ParseCertificate(der)
	if err := os.WriteFile(b.pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			io.WriteString(w, name+" "+r.Proto+" "+string(body))
		}),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return b
}

// oneBytePerWrite writes every byte on its own: with TCP_NODELAY (Go's
// default), each leaves in a segment of its own.
type oneBytePerWrite struct{ net.Conn }

func (c oneBytePerWrite) Write(b []byte) (int, error) {
	for i := range b {
		if _, err := c.Conn.Write(b[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(b), nil
}

// TestRelayBinarySNI is issue 24's judged scenario through the command:
// routes of a YAML file sharing one port, HTTPS backends of their own,
// and real clients (Go crypto/tls and net/http, curl, openssl s_client)
// that reach the backend their name and ALPN choose, see that backend's
// own certificate, and get its answer intact. A ClientHello sent one
// byte per segment routes; a stalled one is closed at the peek timeout
// without reaching a backend.
func TestRelayBinarySNI(t *testing.T) {
	bs := map[string]*httpsBackend{}
	for n, dns := range map[string][]string{
		"a": {"a.example", "*.a.example"}, "b-h2": {"b.example"}, "b": {"b.example"}, "default": {"default.example"},
	} {
		bs[n] = startHTTPSBackend(t, n, dns...)
	}
	listen := freeAddr(t)
	conf := writeConfig(t, `
routes:
  - {name: a, listen: tcp://%[1]s, sni: [a.example, "*.a.example"], target: tcp://%[2]s, peek_timeout: 500ms}
  - {name: b-h2, listen: tcp://%[1]s, sni: [b.example], alpn: [h2], target: tcp://%[3]s, peek_timeout: 500ms}
  - {name: b, listen: tcp://%[1]s, sni: [b.example], target: tcp://%[4]s, peek_timeout: 500ms}
  - {name: default, listen: tcp://%[1]s, target: tcp://%[5]s, peek_timeout: 500ms}
`, listen, bs["a"].addr, bs["b-h2"].addr, bs["b"].addr, bs["default"].addr)
	startProc(t, 4, "-c", conf)
	_, port, _ := net.SplitHostPort(listen)

	// Go: net/http over crypto/tls, each name and protocol, a body each way.
	for _, tc := range []struct {
		host  string
		h2    bool
		want  *httpsBackend
		proto string
	}{
		{"a.example", false, bs["a"], "HTTP/1.1"},
		{"x.a.example", true, bs["a"], "HTTP/2.0"},
		{"b.example", true, bs["b-h2"], "HTTP/2.0"},
		{"b.example", false, bs["b"], "HTTP/1.1"},
		{"other.example", false, bs["default"], "HTTP/1.1"},
	} {
		// Checked by hand: the default backend's certificate does not
		// name other.example, and the point is which certificate it is.
		tcfg := &tls.Config{ServerName: tc.host, InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
			if !cs.PeerCertificates[0].Equal(tc.want.cert) {
				t.Errorf("%s (h2 %v): certificate of %s, want %s's", tc.host, tc.h2, cs.PeerCertificates[0].Subject.CommonName, tc.want.name)
			}
			return nil
		}}
		tr := &http.Transport{TLSClientConfig: tcfg, ForceAttemptHTTP2: tc.h2,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", listen)
			}}
		if !tc.h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		body := strings.Repeat("0123456789", 20000)
		resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Post("https://"+tc.host+":"+port+"/", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s (h2 %v): %v", tc.host, tc.h2, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := tc.want.name + " " + tc.proto + " " + body; err != nil || string(got) != want {
			t.Errorf("%s (h2 %v): answer %.40q (%d bytes), %v; want %.40q (%d bytes)", tc.host, tc.h2, got, len(got), err, want, len(want))
		}
		tr.CloseIdleConnections()
	}

	// A ClientHello one byte per segment.
	raw, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	tc := tls.Client(oneBytePerWrite{raw}, &tls.Config{ServerName: "a.example", RootCAs: certPool(bs["a"])})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("one byte per segment: %v", err)
	}
	if !tc.ConnectionState().PeerCertificates[0].Equal(bs["a"].cert) {
		t.Error("one byte per segment: not a.example's certificate")
	}
	tc.Close()

	// A stalled hello: closed at the peek timeout, with nothing relayed.
	stalled, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stalled.Write([]byte{22, 3, 1, 0, 200, 1, 0})
	stalled.SetDeadline(time.Now().Add(15 * time.Second))
	if n, err := stalled.Read(make([]byte, 1)); n != 0 || isTimeoutErr(err) {
		t.Errorf("stalled hello: read %d bytes, %v; want closed at the peek timeout", n, err)
	}
	stalled.Close()

	if _, err := exec.LookPath("curl"); err != nil {
		t.Log("curl not installed: its part skipped")
	} else {
		for _, tc := range []struct {
			host, flag string
			want       *httpsBackend
		}{
			{"a.example", "--http1.1", bs["a"]},
			{"b.example", "--http2", bs["b-h2"]},
			{"b.example", "--http1.1", bs["b"]},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			out, err := exec.CommandContext(ctx, "curl", "-sS", tc.flag, "--cacert", tc.want.pemFile,
				"--resolve", tc.host+":"+port+":127.0.0.1", "--max-time", "10", "https://"+tc.host+":"+port+"/").CombinedOutput()
			cancel()
			// curl verifies the certificate against the backend's alone.
			if err != nil || !strings.HasPrefix(string(out), tc.want.name+" ") {
				t.Errorf("curl %s %s: %q, %v; want %s's answer", tc.flag, tc.host, out, err, tc.want.name)
			}
		}
	}

	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed: its part skipped")
	}
	for _, tc := range []struct {
		host, alpn string
		want       *httpsBackend
	}{
		{"x.a.example", "", bs["a"]},
		{"b.example", "h2", bs["b-h2"]},
		{"b.example", "http/1.1", bs["b"]},
		{"nothing.example", "", bs["default"]},
	} {
		args := []string{"s_client", "-connect", listen, "-servername", tc.host, "-CAfile", tc.want.pemFile}
		if tc.alpn != "" {
			args = append(args, "-alpn", tc.alpn)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, "openssl", args...)
		cmd.Stdin = strings.NewReader("") // EOF: s_client ends after the handshake
		out, err := cmd.CombinedOutput()
		cancel()
		s := string(out)
		if err != nil || !strings.Contains(s, "Verify return code: 0 (ok)") ||
			!(strings.Contains(s, "CN = "+tc.want.name) || strings.Contains(s, "CN="+tc.want.name)) {
			t.Errorf("openssl -servername %s -alpn %q: %v; want %s's certificate, verified:\n%s", tc.host, tc.alpn, err, tc.want.name, s)
		}
		if tc.alpn != "" && !strings.Contains(s, "ALPN protocol: "+tc.alpn) {
			t.Errorf("openssl -servername %s -alpn %s: protocol not negotiated:\n%s", tc.host, tc.alpn, s)
		}
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func certPool(b *httpsBackend) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(b.cert)
	return p
}
