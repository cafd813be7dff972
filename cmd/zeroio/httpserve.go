package main

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// httpServer is an http.Server on one listener (the metrics or pprof
// server's), whose close loses no request a client sent it.
type httpServer struct {
	srv    *http.Server
	ln     net.Listener
	conns  sync.WaitGroup // the connections Serve accepted, until closed
	closed atomic.Bool
	served chan struct{} // closed when Serve has returned
}

// serveHTTP serves h on ln in the background; failed is called if
// serving stops other than by close.
func serveHTTP(ln net.Listener, h http.Handler, failed func(error)) *httpServer {
	s := &httpServer{ln: ln, served: make(chan struct{})}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: s.track}
	go func() {
		defer close(s.served)
		err := s.srv.Serve(ln)
		if !s.closed.Load() && !errors.Is(err, http.ErrServerClosed) {
			failed(err)
		}
	}()
	return s
}

// track counts the connections from their acceptance to their end.
func (s *httpServer) track(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Done()
	}
}

// close stops accepting, lets every connection accepted finish the
// request it brings, for a second at most, and closes them. Clients not
// yet accepted stay queued on the socket, for the new process of an
// upgrade, which shares it, to serve. http.Server.Shutdown would not
// do: it drops, unanswered, a request it reads once it has begun.
func (s *httpServer) close() {
	if s == nil || s.closed.Swap(true) {
		return
	}
	s.ln.Close()
	<-s.served // Serve counts each connection before it returns
	// Idle keep-alive connections close now (a client retries a request
	// it sent as one did, on a new connection), the others once they
	// have answered.
	s.srv.SetKeepAlivesEnabled(false)
	done := make(chan struct{})
	go func() {
		s.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	s.srv.Close()
}
