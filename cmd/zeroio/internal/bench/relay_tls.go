package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The TLS suite: connection churn of TLS clients through each relay, a new
// connection per request, the traffic of an L4 proxy in front of HTTPS
// services that share one port. The client (Go crypto/tls, full TLS 1.3
// handshakes, each a new connection with one small request and reply)
// runs in this process, the two TLS backends (a and b, Go crypto/tls
// servers) in a child, and the relay in a process of its own.
//
//   - route=plain: one route, no look at the bytes: direct (no relay),
//     zeroio (`zeroio relay LISTEN TARGET`) and HAProxy mode tcp
//   - route=sni: two routes on one port chosen by the ClientHello's server
//     name: zeroio with `sni:` routes, HAProxy with tcp-request
//     inspect-delay and use_backend on req.ssl_sni. The clients alternate
//     the names, and every reply must come from the backend the name
//     picks.
//
// One op is a run of fixed length. The metrics are the relay's CPU time
// and thread switches per connection, connections per second and the p99
// of a connection's life (dial to reply read). The relay's CPU comes from
// the schedstat of each of its threads (nanoseconds, where /proc/PID/stat
// counts 10 ms ticks: a relay using a tenth of a CPU gets too few ticks in
// a few seconds).

// tlsNames are the server names of the two backends.
var tlsNames = [2]string{"a.bench.test", "b.bench.test"}

const (
	tlsClients = 16 // connections in flight
	tlsMsg     = 64 // bytes of request and of reply
)

func relayTLSCases(sc Scale) []Case {
	secs := httpSeconds(sc)
	var cs []Case
	add := func(route, impl string) {
		if !havePeer(impl) {
			return
		}
		cs = append(cs, Case{fmt.Sprintf("route=%s/impl=%s", route, impl), func(b *testing.B) {
			runRelayTLS(b, impl, route == "sni", secs)
		}})
	}
	for _, impl := range []string{"direct", "zeroio", "haproxy"} {
		add("plain", impl)
	}
	for _, impl := range []string{"zeroio", "haproxy"} {
		add("sni", impl)
	}
	return cs
}

func runRelayTLS(b *testing.B, impl string, sni bool, secs int) {
	skipWithoutZeroio(b, impl)
	cert, err := tlsCert()
	if err != nil {
		fatal(b, err)
	}
	bp, backends, err := startTLSBackends(cert)
	if err != nil {
		fatal(b, err)
	}
	defer bp.stop()
	p, err := startTLSRelay(b, impl, sni, backends)
	if err != nil {
		fatal(b, err)
	}
	defer p.stop()
	addr, pid := backends[0], 0
	if p != nil {
		addr, pid = p.addr, p.cmd.Process.Pid
	}
	names := tlsNames[:1]
	if sni {
		names = tlsNames[:]
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	// One connection first: the route works and answers from the right
	// backend, before any time is measured.
	if _, err := tlsRoundTrip(addr, roots, names[len(names)-1]); err != nil {
		fatalf(b, "%s: %v", impl, err)
	}
	b.ReportAllocs()
	var conns, cpuNs, switches float64
	var secsRun time.Duration
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		c0, s0 := procCPUNs(pid), procSwitches(pid)
		r := tlsChurn(addr, roots, names, time.Duration(secs)*time.Second)
		cpuNs += float64(procCPUNs(pid) - c0)
		switches += float64(procSwitches(pid) - s0)
		if r.misrouted > 0 || r.errs > r.conns/100 {
			fatalf(b, "%s: %d connections, %d misrouted, %d failed (first: %v)", impl, r.conns, r.misrouted, r.errs, r.firstErr)
		}
		conns += float64(r.conns)
		secsRun += r.elapsed
		lat = append(lat, r.lat...)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(conns/secsRun.Seconds(), "conn/s")
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Microsecond), "p99-µs")
	}
	if pid != 0 {
		b.ReportMetric(cpuNs/1e3/conns, "cpu-µs/conn")
		b.ReportMetric(switches/conns, "ctxsw/conn")
	}
}

// churnResult is what one run of tlsChurn saw.
type churnResult struct {
	conns, errs, misrouted int
	firstErr               error
	elapsed                time.Duration
	lat                    []time.Duration
}

// tlsChurn runs tlsClients clients against addr for d, each opening a
// connection per round trip, the names taking turns.
func tlsChurn(addr string, roots *x509.CertPool, names []string, d time.Duration) churnResult {
	var (
		mu  sync.Mutex
		res churnResult
		wg  sync.WaitGroup
		seq atomic.Uint64
	)
	start := time.Now()
	deadline := start.Add(d)
	for range tlsClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var n, errs, mis int
			var first error
			for time.Now().Before(deadline) {
				name := names[seq.Add(1)%uint64(len(names))]
				took, err := tlsRoundTrip(addr, roots, name)
				switch {
				case errors.Is(err, errMisrouted):
					mis++
				case err != nil:
					errs++
					if first == nil {
						first = fmt.Errorf("%s: %v", name, err)
					}
				default:
					n++
					lat = append(lat, took)
				}
			}
			mu.Lock()
			res.conns += n
			res.errs += errs
			res.misrouted += mis
			if res.firstErr == nil {
				res.firstErr = first
			}
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

var errMisrouted = errors.New("reply from the wrong backend")

// tlsRoundTrip opens a TLS connection to addr for name, sends a request,
// reads the reply, checks it came from name's backend, and closes; it
// returns how long that took. No session is resumed: each connection is a
// new client's full handshake.
func tlsRoundTrip(addr string, roots *x509.CertPool, name string) (time.Duration, error) {
	t0 := time.Now()
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer raw.Close()
	raw.SetDeadline(t0.Add(10 * time.Second))
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS13})
	var msg [tlsMsg]byte
	if _, err := c.Write(msg[:]); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, msg[:]); err != nil {
		return 0, err
	}
	if msg[0] != name[0] {
		return 0, fmt.Errorf("%w: %q for %s", errMisrouted, msg[0], name)
	}
	return time.Since(t0), nil
}

// tlsBackendsEnv, set in a child's environment, holds the PEM of the
// certificate and key its two backends serve with.
const tlsBackendsEnv = "ZEROIO_TLS_BACKENDS"

func init() {
	if pem := os.Getenv(tlsBackendsEnv); pem != "" {
		os.Exit(tlsBackendsChild([]byte(pem)))
	}
}

// tlsBackendsChild serves backends a and b until stdin closes, after
// printing "LISTEN addrA,addrB".
func tlsBackendsChild(pemBytes []byte) int {
	cert, err := tls.X509KeyPair(pemBytes, pemBytes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tls backends:", err)
		return 1
	}
	var addrs []string
	for _, name := range tlsNames {
		ln, err := tlsBackend(cert, name[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "tls backends:", err)
			return 1
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	fmt.Printf("LISTEN %s\n", strings.Join(addrs, ","))
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return 0
}

// startTLSBackends runs the two backends in a child process (this
// executable re-entered), so that their handshakes and the clients' do
// not share one Go scheduler, and returns it and their addresses.
func startTLSBackends(cert tls.Certificate) (*relayProc, [2]string, error) {
	var addrs [2]string
	exe, err := os.Executable()
	if err != nil {
		return nil, addrs, err
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, addrs, err
	}
	pemBytes := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})...)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), tlsBackendsEnv+"="+string(pemBytes))
	p, err := startListenChild(cmd, "tls backends")
	if err != nil {
		return nil, addrs, err
	}
	a, b, ok := strings.Cut(p.addr, ",")
	if !ok {
		p.stop()
		return nil, addrs, fmt.Errorf("tls backends: listening on %q, want two addresses", p.addr)
	}
	addrs[0], addrs[1] = a, b
	return p, addrs, nil
}

// tlsBackend serves TLS on a loopback port: every connection's request
// of tlsMsg bytes gets a reply of as many, the first byte id.
func tlsBackend(cert tls.Certificate, id byte) (net.Listener, error) {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	if err != nil {
		return nil, err
	}
	go serveConns(ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var msg [tlsMsg]byte
		if _, err := io.ReadFull(c, msg[:]); err != nil {
			return
		}
		msg[0] = id
		c.Write(msg[:])
	})
	return ln, nil
}

// tlsCert makes, once, a self-signed ECDSA P-256 certificate for both
// backend names.
var tlsCert = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "zeroio bench"},
		DNSNames:              tlsNames[:],
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
})

// startTLSRelay starts impl in front of the backends: the first alone
// for a plain route, both chosen by server name for sni. It skips b when
// zeroio relay does not take sni routes.
func startTLSRelay(b *testing.B, impl string, sni bool, backends [2]string) (*relayProc, error) {
	switch {
	case impl == "direct":
		return nil, nil
	case !sni && impl == "haproxy":
		return startRelayProc(impl, "tcp://"+backends[0])
	}
	port, err := freePort("tcp")
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	if impl == "haproxy" {
		return startHAProxy(listen, haproxySNIConf(listen, backends))
	}
	if !sni {
		return startZeroio(impl, listen, "tcp://"+listen, "tcp://"+backends[0])
	}
	conf, err := os.CreateTemp("", "zeroio-sni-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(conf.Name())
	// The routes of issue 24's example: an exact name and a wildcard on
	// one, an exact name on the other, on one address.
	fmt.Fprintf(conf, `routes:
  - {name: a, listen: tcp://%[1]s, sni: [%[2]s, "*.%[2]s"], target: tcp://%[3]s}
  - {name: b, listen: tcp://%[1]s, sni: [%[4]s], target: tcp://%[5]s}
`, listen, tlsNames[0], backends[0], tlsNames[1], backends[1])
	conf.Close()
	if why := zeroioRejects(conf.Name()); why != "" {
		skip(b, "zeroio relay does not route by sni: "+why)
	}
	return startZeroio(impl, listen, "-c", conf.Name())
}

// zeroioRejects checks a config file with zeroio relay --check-config and
// returns its error line, "" if it takes the file.
func zeroioRejects(file string) string {
	if ZeroioCommand == "" {
		return "no zeroio executable to run"
	}
	out, err := exec.Command(ZeroioCommand, "relay", "-c", file, "--check-config").CombinedOutput()
	if err == nil {
		return ""
	}
	// One line: the first error (each route repeats it), less the file.
	msg, _, _ := strings.Cut(strings.TrimSpace(string(out)), "; ")
	return strings.ReplaceAll(msg, file+": ", "")
}

// haproxySNIConf routes by the ClientHello's server name, as HAProxy's
// documentation shows for TLS passthrough: wait for a whole ClientHello,
// then pick the backend from req.ssl_sni.
func haproxySNIConf(listen string, backends [2]string) string {
	return fmt.Sprintf(haproxyHead()+`frontend sni
	bind %s
	tcp-request inspect-delay 5s
	tcp-request content accept if { req.ssl_hello_type 1 }
	use_backend a if { req.ssl_sni -i %s } || { req.ssl_sni -m end -i .%s }
	use_backend b if { req.ssl_sni -i %s }
backend a
	server a %s
backend b
	server b %s
`, listen, tlsNames[0], tlsNames[0], tlsNames[1], backends[0], backends[1])
}

// startHAProxy runs haproxy with conf until stop, and returns once listen
// accepts connections.
func startHAProxy(listen, conf string) (*relayProc, error) {
	dir, err := os.MkdirTemp("", "zeroio-haproxy-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // read at start
	file := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("haproxy", "-db", "-f", file) // not -q: its alerts say why it failed
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	ownGroup(cmd)
	exited, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, addr: listen, exited: exited}
	if !waitListenOrExit(listen, exited) {
		p.stop()
		return nil, fmt.Errorf("haproxy did not listen on %s: %s", listen, stderr)
	}
	return p, nil
}

// relayTLSNotes says what the suite ran with and what it left out.
func relayTLSNotes() []string {
	notes := []string{fmt.Sprintf("Go crypto/tls client and backends, TLS 1.3, ECDSA P-256, a full handshake per connection, %d in flight, %d-byte request and reply", tlsClients, tlsMsg)}
	notes = append(notes, peerNotes("haproxy")()...)
	if ZeroioCommand == "" {
		notes = append(notes, "skipped zeroio: no zeroio executable to run")
	}
	return notes
}

func init() {
	register(Suite{Group: "relay-tls", Name: "RelayTLS", Cases: relayTLSCases, Metric: "cpu-µs/conn",
		AlsoChart: []string{"conn/s", "ctxsw/conn", "p99-µs"},
		Available: func() string { return needTools() }, Notes: relayTLSNotes})
}
