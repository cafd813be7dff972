package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
)

// pprofServer serves the runtime profiles of net/http/pprof for a live
// relay. It has its own mux: importing net/http/pprof also registers the
// handlers on http.DefaultServeMux, which nothing here serves.
type pprofServer struct{ *httpServer }

// startPprof serves /debug/pprof/ on ln. Profiles show code paths and
// memory, so it should listen on a loopback address.
func startPprof(ln net.Listener, log *slog.Logger) *pprofServer {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No WriteTimeout: a CPU profile or trace streams for as long as its
	// ?seconds= asks.
	s := serveHTTP(ln, mux, func(err error) { log.Error("pprof server failed", "err", err) })
	log.Info("pprof", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return &pprofServer{s}
}

func (p *pprofServer) close() {
	if p != nil {
		p.httpServer.close()
	}
}

// checkHostPort refuses a server address that is not host:port with an
// explicit host; what names the flag in the error, example a good value.
func checkHostPort(what, example, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s address %q: want host:port, e.g. %s", what, addr, example)
	}
	if host == "" {
		return fmt.Errorf("%s address %q has no host: write 127.0.0.1%s for this machine only", what, addr, addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s address %q: bad port %q", what, addr, port)
	}
	return nil
}
