package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// The relay suites run every relay as a child process, so that its CPU
// time and memory are its own (/proc/PID/stat, /proc/PID/status) and the
// traffic generators (iperf3, the Go clients) stay out of its profile:
//
//   - zeroio: package relay, one route (this executable re-executed)
//   - iocopy: the Go relay people write first, io.Copy both ways (the
//     standard library splices TCP to TCP)
//   - copy64k: a read/write loop through a 64 KiB buffer per direction
//   - haproxy: HAProxy in mode tcp with option splice-auto
//   - socat: socat TCP-LISTEN,fork (UDP-LISTEN for datagrams)
//   - c-floor: a minimal C epoll relay (cfloor.go); for UDP targets, a
//     minimal C UDP relay (relay_udp_peers.go)
//   - uring-floor: the same on io_uring (cfloor.go), TCP only
//   - stdnet (UDP): net.UDPConn one datagram per call, a goroutine and a
//     connected upstream socket per client
//   - nginx (UDP): nginx stream's UDP proxy (relay_udp_peers.go)
//
// The Go relays are entered from init when ZEROIO_RELAY_CHILD names one.

const (
	relayChildEnv  = "ZEROIO_RELAY_CHILD"  // impl name
	relayTargetEnv = "ZEROIO_RELAY_TARGET" // tcp://host:port or udp://host:port
)

func init() {
	impl := os.Getenv(relayChildEnv)
	if impl == "" {
		return
	}
	os.Exit(relayChild(impl, os.Getenv(relayTargetEnv)))
}

// relayChild serves until its stdin closes, after printing its listen
// address on stdout.
func relayChild(impl, target string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "relay child:", err); return 1 }
	tgt, err := relay.ParseAddr(target)
	if err != nil {
		return fail(err)
	}
	var addr string
	switch impl {
	case "zeroio", "zeroio-event", "zeroio-goroutine", "zeroio-paced", "zeroio-goroutine-paced":
		listen := relay.Addr{Network: "tcp", Address: "127.0.0.1:0"}
		if tgt.Datagram() {
			listen.Network = "udp"
		}
		rt := relay.Route{Name: "r", Listen: listen, Target: tgt}
		name, paced := strings.CutSuffix(impl, "-paced")
		if paced {
			rt.UploadRate, rt.DownloadRate = pacedRate, pacedRate
		}
		engine, _ := strings.CutPrefix(name, "zeroio-")
		if name == "zeroio" {
			engine = "" // the platform's default
		}
		srv, err := relay.New(relay.Config{Routes: []relay.Route{rt}, Engine: engine})
		if err != nil {
			return fail(err)
		}
		if err := srv.Start(); err != nil {
			return fail(err)
		}
		defer srv.Close()
		addr = srv.Addrs("r")[0].String()
	case "stdnet":
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return fail(err)
		}
		defer pc.Close()
		setUDPBuffers(pc)
		go naiveUDPRelay(pc, tgt.Address)
		addr = pc.LocalAddr().String()
	case "iocopy", "copy64k":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		defer ln.Close()
		go naiveRelay(ln, tgt.Address, impl == "copy64k")
		addr = ln.Addr().String()
	default:
		return fail(fmt.Errorf("unknown impl %q", impl))
	}
	if path := os.Getenv("ZEROIO_RELAY_CPUPROFILE"); path != "" {
		// For profiling a relay while a benchmark drives it.
		if f, err := os.Create(path); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	fmt.Printf("LISTEN %s\n", addr)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return 0
}

// naiveRelay is the relay most Go programs contain: a goroutine per
// direction, half-close passed on.
func naiveRelay(ln net.Listener, target string, buffered bool) {
	serveConns(ln, func(c net.Conn) {
		t, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer t.Close()
		done := make(chan struct{})
		pipe := func(dst, src net.Conn) {
			if buffered {
				buf := make([]byte, 64<<10)
				io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
			} else {
				io.Copy(dst, src)
			}
			dst.(*net.TCPConn).CloseWrite()
		}
		go func() { pipe(t, c); close(done) }()
		pipe(c, t)
		<-done
	})
}

// serveConns runs handle for each connection ln accepts, on a goroutine
// of its own, and closes the connection after; it returns when ln closes.
func serveConns(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// setUDPBuffers gives a socket of the naive UDP relay the buffers every
// other relay here has.
func setUDPBuffers(c *net.UDPConn) {
	c.SetReadBuffer(relayUDPBuf)
	c.SetWriteBuffer(relayUDPBuf)
}

// naiveUDPRelay is the UDP relay most Go programs contain: net.UDPConn,
// one datagram per call, a connected upstream socket and a goroutine per
// client (sessions never expire: a benchmark baseline only).
func naiveUDPRelay(pc *net.UDPConn, target string) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return
	}
	sessions := map[netip.AddrPort]*net.UDPConn{}
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		up := sessions[from]
		if up == nil {
			if up, err = net.DialUDP("udp", nil, ta); err != nil {
				continue
			}
			setUDPBuffers(up)
			sessions[from] = up
			go func() {
				b := make([]byte, 65535)
				for {
					n, err := up.Read(b)
					if err != nil {
						return
					}
					pc.WriteToUDPAddrPort(b[:n], from)
				}
			}()
		}
		up.Write(buf[:n])
	}
}

// relayProc is a running relay child or external relay.
type relayProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	// exited, if not nil, is closed once a goroutine's cmd.Wait returned
	// (a second Wait would return at once).
	exited <-chan struct{}
	// cleanup, if not nil, runs once the relay stopped (removes its
	// configuration directory).
	cleanup func()
}

// haproxyHead opens every HAProxy configuration of the benchmarks, so that
// HAProxy runs alike in each: TCP mode, splice-auto (HAProxy splices where
// it judges it worth it), and client and server timeouts longer than any
// benchmark.
func haproxyHead() string {
	return fmt.Sprintf(haproxyHeadFormat, haproxyMaxconn(openFileLimit()))
}

// haproxyMaxconn is 6000, more than any case opens, or as many as the
// open-file limit holds: HAProxy counts two descriptors a connection and
// two a pipe (maxpipes is maxconn/4, for splice-auto), and refuses to
// start ("Cannot raise FD limit to 1171, limit is 1024") when maxconn
// needs more than the limit.
func haproxyMaxconn(limit uint64, ok bool) int {
	const want, spare = 6000, 100
	if !ok || limit >= want*5/2+spare {
		return want
	}
	return max(int(limit)-spare, 3) * 2 / 5
}

const haproxyHeadFormat = `global
	maxconn %d
defaults
	mode tcp
	timeout connect 5s
	timeout client 1h
	timeout server 1h
	option splice-auto
`

// startRelayProc starts impl relaying to target ("tcp://..." or
// "udp://...") and returns once it listens.
func startRelayProc(impl, target string) (*relayProc, error) {
	var cmd *exec.Cmd
	tgt := strings.SplitN(target, "://", 2)
	switch {
	case impl == "c-floor" && tgt[0] == "udp":
		return udpRelayFloor.start(tgt[1])
	case impl == "nginx" && tgt[0] == "udp":
		return startNginxStream(tgt[1])
	}
	switch impl {
	case "c-floor":
		return cfloor.start(tgt[1])
	case "uring-floor":
		return uring.start(tgt[1])
	case "haproxy", "socat":
		port, err := freePort(tgt[0])
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if impl == "socat" {
			if tgt[0] == "udp" {
				// Socket buffers as large as every other UDP relay's here.
				bufs := fmt.Sprintf("rcvbuf=%d,sndbuf=%d", relayUDPBuf, relayUDPBuf)
				cmd = exec.Command("socat", fmt.Sprintf("UDP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,%s", port, bufs), "UDP:"+tgt[1]+","+bufs)
			} else {
				cmd = exec.Command("socat", fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,backlog=4096", port), "TCP:"+tgt[1])
			}
		} else {
			cfg, err := os.CreateTemp("", "zeroio-haproxy-*.cfg")
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(cfg, haproxyHead()+`listen relay
	bind %s
	server target %s
`, addr, tgt[1])
			cfg.Close()
			defer os.Remove(cfg.Name())
			// Not -q: that would silence its alerts, the reason it
			// did not start.
			cmd = exec.Command("haproxy", "-db", "-f", cfg.Name())
		}
		// Their stderr is kept for an error message only, not shown:
		// socat reports the broken pipes of connections iperf3 closes,
		// which would garble the results.
		stderr := &tailBuffer{max: 4 << 10}
		cmd.Stderr = stderr
		ownGroup(cmd)
		exited, err := startChild(cmd)
		if err != nil {
			return nil, err
		}
		p := &relayProc{cmd: cmd, addr: addr, exited: exited}
		if tgt[0] == "udp" && waitOrExit(exited, func() bool { return udpBound(port) }) ||
			tgt[0] == "tcp" && waitListenOrExit(addr, exited) {
			return p, nil
		}
		p.stop()
		why := stderr.String()
		if why == "" {
			why = "no message on stderr"
		}
		return nil, fmt.Errorf("%s did not listen on %s: %s", impl, addr, why)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd = exec.Command(exe)
	cmd.Env = append(os.Environ(), relayChildEnv+"="+impl, relayTargetEnv+"="+target)
	return startListenChild(cmd, "relay child "+impl)
}

// startListenChild starts a relay that prints "LISTEN host:port" on
// stdout once it listens and serves until its stdin closes.
func startListenChild(cmd *exec.Cmd, name string) (*relayProc, error) {
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "LISTEN ") {
		p.stop()
		return nil, fmt.Errorf("%s: %q %v", name, line, err)
	}
	p.addr = strings.TrimSpace(strings.TrimPrefix(line, "LISTEN "))
	return p, nil
}

// viaRelay puts impl in front of target ("tcp://host:port" or
// "udp://host:port") and returns the address clients dial and the relay;
// for impl "direct" that is target's own address and a nil relay, whose
// stop does nothing.
func viaRelay(b *testing.B, impl, target string) (string, *relayProc) {
	if impl == "direct" {
		return strings.SplitN(target, "://", 2)[1], nil
	}
	p, err := startRelayProc(impl, target)
	if err != nil {
		fatal(b, err)
	}
	return p.addr, p
}

func (p *relayProc) stop() {
	if p == nil {
		return
	}
	if p.stdin != nil {
		p.stdin.Close()
	} else {
		killGroup(p.cmd, false)
	}
	done := p.exited
	if done == nil {
		d := make(chan struct{})
		go func() { p.cmd.Wait(); close(d) }()
		done = d
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		if p.stdin == nil {
			killGroup(p.cmd, true) // the forked children too: they may hold its stderr
		} else {
			p.cmd.Process.Kill()
		}
		<-done
	}
	if p.stdin == nil {
		killGroup(p.cmd, true) // forked children that outlived the parent
	}
	if p.cleanup != nil {
		p.cleanup()
	}
}

func freePort(network string) (int, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// needTools reports every missing program ("nginx, wrk not on PATH"),
// or "" if all are present: a user without both learns of both at once,
// not of the second after installing the first.
func needTools(tools ...string) string {
	if runtime.GOOS != "linux" {
		return "relay suites read /proc: linux only"
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return strings.Join(missing, ", ") + " not on PATH"
	}
	return ""
}

// externalPeers are the relays that are programs of their own: a case
// runs against them only when they are on PATH.
var externalPeers = []string{"haproxy", "socat"}

// havePeer reports whether impl can run here: our own relays always, the
// external ones when installed.
func havePeer(impl string) bool {
	for _, p := range externalPeers {
		if impl == p {
			return needTools(p) == ""
		}
	}
	return true
}

// peerNotes says which external peers a suite found and which it skipped,
// and why.
func peerNotes(peers ...string) func() []string {
	return func() []string {
		var found, notes []string
		for _, p := range peers {
			if why := needTools(p); why != "" {
				notes = append(notes, "skipped "+p+": "+why)
			} else {
				found = append(found, p)
			}
		}
		if len(found) > 0 {
			notes = append([]string{"found " + strings.Join(found, ", ")}, notes...)
		}
		return notes
	}
}

func init() {
	register(Suite{Group: "relay", Name: "RelayIperf3", Cases: relayIperf3Cases, Metric: "Gbit/s", AlsoChart: []string{"cpu-s/GiB"},
		Available: func() string { return needTools("iperf3") }, Notes: peerNotes("haproxy", "socat")})
	register(Suite{Group: "relay", Name: "RelayIdle", Cases: relayIdleCases, Metric: "KiB/conn", AlsoChart: []string{"pipes"},
		Available: func() string { return needTools() }, Notes: peerNotes("haproxy")})
	register(Suite{Group: "relay-udp", Name: "RelayUDP", Cases: relayUDPCases, Metric: "p50-µs",
		AlsoChart: []string{"p99-µs", "delivered/s", "cpu-ns/dgram", "KiB/session"},
		Available: func() string { return needTools() }, Notes: relayUDPNotes})
	register(Suite{Group: "relay", Name: "RelayLatency", Cases: relayLatencyCases, Metric: "p50-µs", AlsoChart: []string{"p99-µs"}, Paired: true,
		Available: func() string { return needTools() }, Notes: relayLatencyNotes})
	register(Suite{Group: "relay", Name: "RelayStreams", Cases: relayStreamsCases,
		Available: func() string { return needTools() }})
}
