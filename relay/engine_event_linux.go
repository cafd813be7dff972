package relay

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// availableEngines: on Linux the event engine is the default.
var availableEngines = []string{EngineEvent, EngineGoroutine}

func newPlatformEngine(s *Server, name string) engine {
	if name == EngineGoroutine {
		return newGoroutineEngine(s)
	}
	return &eventEngine{s: s}
}

// eventEngine relays stream connections from GOMAXPROCS event loops, each
// a goroutine waiting in epoll_wait(2) on an epoll instance of its own
// (see loop, and evloop.ReserveProcs for the Ps busy loops hold). Every loop
// watches every listener (EPOLLEXCLUSIVE, so that one loop wakes per new
// connection) and accepts one connection per turn until EAGAIN. Each
// connection goes to the loop with the fewest (pick), which keeps it, as
// a small struct in its slab, until the connection ends: no goroutine and
// no allocation per connection.
type eventEngine struct {
	s       *Server
	mu      sync.Mutex // guards started and the writing of loops
	running bool
	loops   []*loop        // fixed once started
	wg      sync.WaitGroup // the loops' goroutines
	closed  atomic.Bool
	pipes   atomic.Int64 // splice pipes the loops have open, idle ones too
}

// pipeMax returns the most splice pipes the loops may open; -1: no bound. The
// descriptor budget (fdBudget) counts fdsPerPair descriptors per stream:
// its two sockets, and room for a pipe (two descriptors) per two streams.
// Relays whose clients read slowly keep their pipes full, and without
// this bound would take every descriptor the process has, leaving none
// for accepts, dials, health checks, metrics or reloads.
func (e *eventEngine) pipeMax() int64 {
	b := e.s.fdBudget.Load()
	if e.s.noSplice {
		return 0
	}
	if b <= 0 {
		return -1
	}
	return b * (fdsPerPair - 2) / 2
}

// start creates the loops on first use and returns them.
func (e *eventEngine) start() []*loop {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running || e.closed.Load() {
		return e.loops
	}
	e.running = true
	n := evloop.ReserveProcs()
	for i := range n {
		l, err := newLoop(e, i)
		if err != nil {
			// Out of descriptors at start: run with the loops we
			// have, or none (connections are then refused).
			e.s.log.Error("event loop not started", "err", err)
			break
		}
		e.loops = append(e.loops, l)
	}
	evloop.ReleaseProcs(n - len(e.loops))
	for _, l := range e.loops {
		e.wg.Add(1)
		go l.run()
	}
	return e.loops
}

// started returns the loops, if started.
func (e *eventEngine) started() []*loop {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loops
}

// adopt turns each of lns into an evListener.
func (e *eventEngine) adopt(lns []net.Listener) ([]net.Listener, error) {
	for i, ln := range lns {
		al, err := adoptListener(e, ln)
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		lns[i] = al
	}
	return lns, nil
}

func (e *eventEngine) serve(f *front, ln net.Listener) {
	defer f.srv.serveWG.Done()
	l, ok := ln.(*evListener)
	loops := e.start()
	if !ok || len(loops) == 0 {
		// Not an evListener: package net's Accept, each client handed
		// to a loop.
		f.acceptEach(ln, nil, func(c net.Conn) { e.hand(f, c, false) })
		return
	}
	for _, lp := range loops {
		lp.call(func() { lp.addListener(l, f) })
	}
	select {
	case <-f.done:
	case <-l.done:
	}
}

// serveQueued serves c, taken from the accept queue of a listener of f
// that a reload closed. It was waiting for a slot there, if at a limit,
// so it waits for one in its loop as an accepted client does, rather
// than being closed as over the limit.
func (e *eventEngine) serveQueued(f *front, c net.Conn) { e.hand(f, c, true) }

// hand moves c's socket out of package net (a duplicate of its
// descriptor, then c is closed) into the least loaded loop; wait is
// accepted's.
func (e *eventEngine) hand(f *front, c net.Conn, wait bool) {
	loops := e.start()
	fd := -1
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(f uintptr) {
				fd, _ = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
			})
		}
	}
	c.Close()
	if fd < 0 || len(loops) == 0 {
		if fd >= 0 {
			nbsys.Close(fd)
		}
		f.acceptFailed()
		return
	}
	e.s.mu.Lock()
	closed := e.s.sealed
	e.s.mu.Unlock()
	if closed {
		nbsys.Close(fd)
		return
	}
	lp := leastLoaded(loops)
	peer := nbsys.PeerAddr(fd)
	f.srv.connWG.Add(1) // before Update's serveWG.Done: Shutdown waits for it
	lp.pass(f, fd, peer, wait)
}

func (e *eventEngine) abort(why error) {
	if e.closed.Load() {
		return
	}
	for _, lp := range e.started() {
		lp.post(func() { lp.abortAll(why) })
	}
}

func (e *eventEngine) close() {
	e.mu.Lock()
	if e.closed.Swap(true) {
		e.mu.Unlock()
		return
	}
	loops := e.loops
	e.mu.Unlock()
	for _, lp := range loops {
		lp.post(func() { lp.stop = true })
	}
	e.wg.Wait()
	evloop.ReleaseProcs(len(loops))
}

// loopLoads reports the connections each loop serves or is about to.
func (e *eventEngine) loopLoads() []int64 {
	if e.closed.Load() {
		return nil
	}
	var n []int64
	for _, lp := range e.started() {
		n = append(n, int64(lp.load()))
	}
	return n
}

// evListener is a stream listener the event loops accept on: package
// net's listener, its descriptor taken over (duplicated, and package
// net's closed, so that Go's netpoller is not woken by every connection
// the loops accept). It is a net.Listener for the route's bookkeeping
// (Addr, Close, and SyscallConn for the hand-over of queued connections);
// its Accept is not used.
type evListener struct {
	e         *eventEngine
	fd        int
	addr      net.Addr
	unlink    string // the Unix socket file to remove at Close
	once      sync.Once
	unwatched sync.Once     // see unwatch
	done      chan struct{} // closed when Close has finished
	mu        sync.Mutex    // Control, and loops adding l, against Close
	closing   bool
}

var errEventAccept = errors.New("relay: the event loops accept on this listener")

// adoptListener turns ln into an evListener.
func adoptListener(e *eventEngine, ln net.Listener) (*evListener, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, errors.New("relay: listener has no descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var ferr error
	rc.Control(func(f uintptr) {
		fd, ferr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	})
	if ferr != nil {
		return nil, os.NewSyscallError("fcntl", ferr)
	}
	l := &evListener{e: e, fd: fd, addr: ln.Addr(), done: make(chan struct{})}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
		if p := l.addr.String(); p != "" && p[0] != '@' {
			l.unlink = p
		}
	} else {
		// Accepted sockets inherit TCP_NODELAY from the listener
		// (inet_csk_clone_lock copies the socket), which saves a
		// setsockopt per connection; routes with Nagle clear it.
		nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	ln.Close()
	return l, nil
}

func (l *evListener) Accept() (net.Conn, error) { return nil, errEventAccept }

// setUnlink sets whether Close removes l's Unix socket file (a hand-over
// leaves it to the other process). Before Close only.
func (l *evListener) setUnlink(on bool) {
	if !on {
		l.unlink = ""
	} else if p := l.addr.String(); l.addr.Network() == "unix" && p != "" && p[0] != '@' {
		l.unlink = p
	}
}

func (l *evListener) Addr() net.Addr { return l.addr }

// stopWatching keeps any loop from starting to watch l.
func (l *evListener) stopWatching() {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
}

// unwatch stops every loop watching l; none starts again. Close does
// it first, and closeQueued before it takes l's queue.
func (l *evListener) unwatch() {
	l.unwatched.Do(func() {
		l.stopWatching()
		for _, lp := range l.e.started() {
			lp.call(func() { lp.removeListener(l) })
		}
	})
}

// Close stops every loop watching l, then closes it: no loop calls
// accept on a descriptor number that may be reused.
func (l *evListener) Close() error {
	l.once.Do(func() {
		l.unwatch()
		l.mu.Lock()
		nbsys.Close(l.fd)
		l.fd = -1
		l.mu.Unlock()
		if l.unlink != "" {
			os.Remove(l.unlink)
		}
		close(l.done)
	})
	<-l.done
	return nil
}

// SyscallConn gives queued its descriptor.
func (l *evListener) SyscallConn() (syscall.RawConn, error) { return evRawConn{l}, nil }

type evRawConn struct{ l *evListener }

func (r evRawConn) Control(f func(fd uintptr)) error {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.l.fd < 0 {
		return net.ErrClosed
	}
	f(uintptr(r.l.fd))
	return nil
}

func (evRawConn) Read(func(uintptr) bool) error  { return errEventAccept }
func (evRawConn) Write(func(uintptr) bool) error { return errEventAccept }
