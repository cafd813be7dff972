package bench

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The RelayUDP suite's peers that are programs of their own: a minimal C
// UDP relay (impl=c-floor, the floor) and nginx stream's UDP proxy
// (impl=nginx).

// udpRelaySource is the minimal C UDP relay (see the file's comment).
//
//go:embed testdata/udprelay/relay.c
var udpRelaySource []byte

var udpRelayFloor = newCProgram(&cProgram{name: "c-floor", src: udpRelaySource}, "udprelay")

// nginxStreamConf is nginx's configuration as a UDP relay: one worker per
// CPU, each with a socket of its own on the listening port (reuseport:
// the kernel hashes each client to one), buffers as large as every
// relay's here (relayUDPBuf; nginx has no directive for its upstream
// sockets' buffers), and sessions that outlive any benchmark (the default
// proxy_timeout, 10 minutes, would too; said here so no one wonders).
// Arguments: load_module line, directory, listen address, proxy_pass's
// argument (a target or an upstream's name), buffer size, and the
// upstream blocks, if any.
const nginxStreamConf = `%[1]s
worker_processes auto;
worker_rlimit_nofile 20000;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events {
	worker_connections 8192;
}
stream {
%[6]s	server {
		listen %[3]s udp reuseport rcvbuf=%[5]d sndbuf=%[5]d;
		proxy_pass %[4]s;
		proxy_timeout 1h;
	}
}
`

// nginxStream finds how nginx gets its stream module: built in, or the
// load_module line of the module Debian's libnginx-mod-stream (and other
// distributions' packages) install. It fails when nginx is not on PATH or
// has no stream module.
var nginxStream = sync.OnceValues(func() (string, error) {
	if why := needTools("nginx"); why != "" {
		return "", fmt.Errorf("nginx: %s", why)
	}
	out, _ := exec.Command("nginx", "-V").CombinedOutput()
	for _, f := range strings.Fields(string(out)) {
		if f == "--with-stream" {
			return "", nil // built in
		}
	}
	if so := streamModule(); so != "" {
		return "load_module " + so + ";", nil
	}
	return "", fmt.Errorf("nginx: no stream module (install libnginx-mod-stream)")
})

// streamModule returns the path of ngx_stream_module.so: the one Debian's
// modules-available/mod-stream.conf loads (relative to nginx's prefix,
// /usr/share/nginx), else the first of the usual places that has it.
func streamModule() string {
	var paths []string
	if conf, err := os.ReadFile("/usr/share/nginx/modules-available/mod-stream.conf"); err == nil {
		for _, l := range strings.Split(string(conf), "\n") {
			if p, ok := strings.CutPrefix(strings.TrimSpace(l), "load_module "); ok {
				p = strings.TrimSuffix(strings.TrimSpace(p), ";")
				if !filepath.IsAbs(p) {
					p = filepath.Join("/usr/share/nginx", p)
				}
				paths = append(paths, p)
			}
		}
	}
	for _, dir := range []string{"/usr/lib/nginx/modules", "/usr/share/nginx/modules", "/usr/lib64/nginx/modules", "/etc/nginx/modules"} {
		paths = append(paths, filepath.Join(dir, "ngx_stream_module.so"))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// nginxStreamWhyNot says why nginx cannot relay UDP here, "" if it can.
func nginxStreamWhyNot() string {
	if _, err := nginxStream(); err != nil {
		return err.Error()
	}
	return ""
}

// relayUDPNotes says which of the suite's external peers it found and
// which it skipped, and why.
func relayUDPNotes() []string {
	notes := peerNotes("socat")()
	if why := nginxStreamWhyNot(); why != "" {
		notes = append(notes, "skipped nginx: "+why)
	} else {
		notes = append(notes, "found nginx with its stream module")
	}
	if why := udpRelayFloor.whyNot(); why != "" {
		notes = append(notes, "skipped "+why)
	}
	return notes
}

// startNginxStream starts nginx relaying UDP from a free loopback port to
// target and returns once it has bound the port.
func startNginxStream(target string) (*relayProc, error) {
	return startNginxStreamConf(target, "")
}

// startNginxStreamConf is startNginxStream with proxy_pass's argument
// and the upstream blocks it may name.
func startNginxStreamConf(proxyPass, upstreams string) (*relayProc, error) {
	load, err := nginxStream()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("", "zeroio-nginx-udp-*")
	if err != nil {
		return nil, err
	}
	// Started as root, nginx's workers run as an unprivileged user.
	port, err := freePort("udp")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err == nil {
		conf := fmt.Sprintf(nginxStreamConf, load, dir, addr, proxyPass, relayUDPBuf, upstreams)
		err = os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
	}
	if err != nil {
		removeTempDir(dir)
		return nil, err
	}
	cmd, exited, said, err := startNginxIn(dir)
	if err != nil {
		removeTempDir(dir)
		return nil, err
	}
	p := &relayProc{cmd: cmd, addr: addr, exited: exited, cleanup: func() { removeTempDir(dir) }}
	if waitOrExit(exited, func() bool { return udpBound(port) }) {
		return p, nil
	}
	why := said()
	p.stop()
	return nil, fmt.Errorf("nginx did not bind udp %s: %s", addr, why)
}

// udpBound reports whether a UDP socket is bound to 127.0.0.1:port, from
// /proc/net/udp (proc(5)): there is no connection to try, as there is
// for TCP.
func udpBound(port int) bool {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 1 && f[1] == want {
			return true
		}
	}
	return false
}

// procTree returns pid and its descendants, from each thread's children
// file (/proc/PID/task/TID/children, proc(5)): nginx's workers, socat's
// forked sessions. Nil for pid 0.
func procTree(pid int) []int {
	if pid == 0 {
		return nil
	}
	pids := []int{pid}
	for i := 0; i < len(pids) && len(pids) < 10000; i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pids[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pids[i], t.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					pids = append(pids, c)
				}
			}
		}
	}
	return pids
}

// treeCPUNs is the CPU time of a relay's processes (procCPUNs of each),
// 0 for no relay.
func treeCPUNs(p *relayProc) int64 {
	var n int64
	for _, pid := range procTree(p.pid()) {
		n += procCPUNs(pid)
	}
	return n
}

// treeRSS is the resident memory of a relay's processes in KiB.
func treeRSS(p *relayProc) float64 {
	var n float64
	for _, pid := range procTree(p.pid()) {
		n += procStatus(pid, "VmRSS")
	}
	return n
}

// pid is the relay's process ID, 0 for none (impl "direct").
func (p *relayProc) pid() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
