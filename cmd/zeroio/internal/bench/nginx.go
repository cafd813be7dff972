package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// nginxServer is an nginx serving fixed bodies from a temporary directory
// on loopback, with its own configuration: the upstream of the HTTP suite.
type nginxServer struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	exited <-chan struct{}
	bodies map[string][]byte // by URL path
}

// httpBodies are the files the HTTP suite's nginx serves.
var httpBodies = map[string]int{"/1k.bin": 1 << 10, "/1m.bin": 1 << 20}

// nginxConf is the upstream's configuration. One worker: on the 2-CPU
// machines this suite targets, wrk, the relay and nginx already share the
// CPUs, and a second worker would only add scheduling between processes
// that a single epoll loop does not need (one nginx worker serves more
// 1 KiB requests per second than any relay here passes on); a fixed,
// small upstream keeps the relay's cost the thing that varies between
// cells. Keep-alive connections are never closed by request count, so
// wrk's keep-alive workloads stay keep-alive; sendfile serves the bodies.
const nginxConf = `worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
	worker_connections 4096;
}
http {
	access_log off;
	sendfile on;
	keepalive_requests 1000000000;
	keepalive_timeout 60s;
	client_body_temp_path %[1]s/tmp;
	proxy_temp_path %[1]s/tmp;
	fastcgi_temp_path %[1]s/tmp;
	uwsgi_temp_path %[1]s/tmp;
	scgi_temp_path %[1]s/tmp;
	default_type application/octet-stream;
	server {
		listen %[2]s backlog=4096;
		root %[1]s/www;
	}
}
`

// startNginx starts nginx on a free loopback port and returns once it
// answers.
func startNginx() (*nginxServer, error) {
	dir, err := tempDir("", "zeroio-nginx-*")
	if err != nil {
		return nil, err
	}
	n := &nginxServer{dir: dir, bodies: map[string][]byte{}}
	if err := n.prepare(); err != nil {
		removeTempDir(dir)
		return nil, err
	}
	cmd, exited, said, err := startNginxIn(dir)
	if err != nil {
		removeTempDir(dir)
		return nil, err
	}
	n.cmd = cmd
	n.exited = exited
	if !waitListenOrExit(n.addr, n.exited) {
		why := said()
		n.stop()
		return nil, fmt.Errorf("nginx did not listen on %s: %s", n.addr, why)
	}
	return n, nil
}

// startNginxIn starts nginx on dir/nginx.conf, its error log in dir, in a
// process group of its own (master and workers stop together). said
// returns what nginx said, for an error message: its error log, or, if
// it failed before the log was open (a bad option, a library missing),
// its stderr.
func startNginxIn(dir string) (cmd *exec.Cmd, exited <-chan struct{}, said func() string, err error) {
	errorLog := filepath.Join(dir, "error.log")
	cmd = exec.Command("nginx", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", errorLog)
	ownGroup(cmd)
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	exited, err = startChild(cmd)
	said = func() string {
		log, _ := os.ReadFile(errorLog)
		if why := strings.TrimSpace(string(log)); why != "" {
			return why
		}
		if why := stderr.String(); why != "" {
			return why
		}
		return "no message in its error log or on stderr"
	}
	return cmd, exited, said, err
}

// prepare writes the bodies and the configuration. The directory is made
// world-readable: started as root, nginx's worker runs as an unprivileged
// user that must read the bodies.
func (n *nginxServer) prepare() error {
	www := filepath.Join(n.dir, "www")
	for _, d := range []string{www, filepath.Join(n.dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(n.dir, 0o755); err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'z', 'e', 'r', 'o', 'i', 'o'})
	for path, size := range httpBodies {
		b := make([]byte, size)
		rng.Read(b)
		n.bodies[path] = b
		if err := os.WriteFile(filepath.Join(www, path), b, 0o644); err != nil {
			return err
		}
	}
	port, err := freePort("tcp")
	if err != nil {
		return err
	}
	n.addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf(nginxConf, n.dir, n.addr)
	return os.WriteFile(filepath.Join(n.dir, "nginx.conf"), []byte(conf), 0o644)
}

func (n *nginxServer) stop() {
	if n.cmd != nil {
		killGroup(n.cmd, false)
		select {
		case <-n.exited:
		case <-time.After(2 * time.Second):
			killGroup(n.cmd, true)
			<-n.exited
		}
	}
	removeTempDir(n.dir)
}
