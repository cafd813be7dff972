package relay

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// A hand-over moves a running Server's sockets to another process (a new
// binary, as on nginx's USR2) over a Unix socket, as descriptors
// (SCM_RIGHTS), all or nothing, in two phases:
//
//	sender                              receiver
//	pause what goes over
//	state: frParts... frEnd  ───────►   build a Server from it and cfg
//	                         ◄───────   frReady
//	frCommit                 ───────►
//	                         ◄───────   frDone, then serve
//	close its copies
//
// Until the sender reads frDone it has closed nothing, and any error,
// end of file, frAbort or step taking longer than handOverStep makes it
// go on serving everything as before; the receiver closes what it got,
// and serves nothing before it read frCommit. A listening socket is one
// socket in both processes (its accept queue too), so the clients queued
// on it are the receiver's once the sender stops accepting.

// handOverStep bounds each step of a hand-over: a peer that takes longer
// fails it.
var handOverStep = 5 * time.Second // a variable for tests

var errHandOverBusy = errors.New("relay: a hand-over is already in flight")

// HandOver sends everything s holds to the process at the other end of
// c: listening sockets (TCP, Unix, UDP), connections queued on them,
// established streams and UDP sessions. It returns nil once that process
// has taken them over; s then serves nothing and owns no descriptor
// except (goroutine engine) streams it could not hand over, which it
// drains: call Shutdown. On any error s goes on serving everything as
// before, having lost nothing.
//
// The other process calls [TakeOver] on its end of c. Each step waits at
// most a few seconds for the peer. A second HandOver while one is in
// flight returns an error at once; an Update waits for it.
func (s *Server) HandOver(c *net.UnixConn) error {
	if !s.handing.CompareAndSwap(false, true) {
		return errHandOverBusy
	}
	defer s.handing.Store(false)
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	defer c.SetDeadline(time.Time{})
	x, err := s.export()
	if err != nil {
		return fmt.Errorf("relay: hand-over refused: %w", err)
	}
	defer closeFDs(x.fds)
	if err := x.exchange(c); err != nil {
		x.resume()
		abortPeer(c, err)
		return fmt.Errorf("relay: hand-over failed, the server goes on: %w", err)
	}
	s.letGo(x)
	return nil
}

// export is what a hand-over sends: its frames, and the duplicated
// descriptors they carry, closed once it is over.
type export struct {
	frames  []outFrame
	records int
	nfds    int   // descriptors the frames carry
	fds     []int // the duplicates this process made for it
	lns     []any // the stream listeners sent
	// resume lets what the engine paused go on, after a failure;
	// commit closes its copies, after a success.
	resume, commit func()
}

// streamMover is an engine that hands its streams over (the event
// engine); the others keep theirs, and drain them.
type streamMover interface {
	// freeze pauses the engine's streams at a safe point and adds
	// them to x, setting x.resume and x.commit to end the pause. The
	// Server's mu is held.
	freeze(x *export) error
	// adoptStreams serves the streams a hand-over brought, once the
	// sender let go. The Server's mu is held.
	adoptStreams(ts []*takenStream)
}

type outFrame struct {
	payload []byte
	fds     []int
}

// add appends a record of kind carrying fds, starting a new frame when
// the current one would be over its bounds.
func (x *export) add(kind uint8, fds []int, fill func([]byte) []byte) {
	n := len(x.frames)
	if n == 0 || len(x.frames[n-1].fds)+len(fds) > maxFrameFDs || len(x.frames[n-1].payload) > framePayloadGoal {
		x.frames = append(x.frames, outFrame{})
		n++
	}
	f := &x.frames[n-1]
	f.payload = appendRecord(f.payload, kind, len(fds), fill)
	f.fds = append(f.fds, fds...)
	x.records++
	x.nfds += len(fds)
}

// export pauses what goes over and returns its state.
func (s *Server) export() (*export, error) {
	x := &export{resume: func() {}, commit: func() {}}
	s.mu.Lock()
	err := s.exportListeners(x)
	if m, ok := s.eng.(streamMover); ok && err == nil {
		err = m.freeze(x)
	}
	s.mu.Unlock()
	if err != nil {
		closeFDs(x.fds)
		return nil, err
	}
	return x, nil
}

// exportListeners adds the listening sockets of every front (those in
// their retiring grace too) and UDP route. s.mu is held.
func (s *Server) exportListeners(x *export) error {
	if !s.started || s.closed {
		return errors.New("the server is not running")
	}
	keys := make([]string, 0, len(s.fronts))
	for k := range s.fronts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := s.fronts[k]
		socks := make([]any, 0, len(f.lns))
		for _, ln := range f.lns {
			socks = append(socks, ln)
		}
		for _, r := range f.retiring {
			for _, ln := range r.lns {
				socks = append(socks, ln)
			}
		}
		x.lns = append(x.lns, socks...)
		if err := x.addListener(listenerRec{name: f.table.Load().routes[0].name}, socks); err != nil {
			return err
		}
	}
	udps := make([]*route, 0, len(s.routes)+len(s.udpFronts))
	for _, name := range s.sortedNames() {
		if rt := s.routes[name]; rt.udp != nil {
			udps = append(udps, rt)
		}
	}
	for _, f := range s.udpFronts { // routes sharing a port: its sockets' route
		udps = append(udps, f.sock)
	}
	for _, rt := range udps {
		socks := make([]any, 0, len(rt.udp.lns))
		for _, ln := range rt.udp.lns {
			socks = append(socks, ln.Conn)
		}
		if err := x.addListener(listenerRec{name: rt.name}, socks); err != nil {
			return err
		}
		if err := x.exportSessions(rt); err != nil {
			return err
		}
	}
	return nil
}

// addListener adds records for socks, the sockets of one listen address,
// as many as a frame takes each.
func (x *export) addListener(r listenerRec, socks []any) error {
	fds := make([]int, 0, len(socks))
	for _, sk := range socks {
		fd, err := rawFD(sk)
		if err != nil {
			closeFDs(fds)
			return err
		}
		fds = append(fds, fd)
	}
	x.fds = append(x.fds, fds...)
	for len(fds) > 0 {
		n := min(len(fds), maxFrameFDs)
		x.add(recListener, fds[:n], r.append)
		fds = fds[n:]
	}
	return nil
}

// exchange sends x and takes the receiver through the commit.
func (x *export) exchange(c *net.UnixConn) error {
	c.SetDeadline(time.Now().Add(handOverStep))
	for _, f := range x.frames {
		if err := writeFrame(c, frParts, f.payload, f.fds); err != nil {
			return err
		}
	}
	if err := writeFrame(c, frEnd, appendEnd(nil, x.records, x.nfds), nil); err != nil {
		return err
	}
	if err := expect(c, frReady); err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(handOverStep))
	if err := writeFrame(c, frCommit, nil, nil); err != nil {
		return err
	}
	return expect(c, frDone)
}

// expect reads the peer's next frame, which must be of type typ: a frame
// of another type, an abort or an error fails the hand-over.
func expect(c *net.UnixConn, typ uint8) error {
	c.SetReadDeadline(time.Now().Add(handOverStep))
	h, p, fds, err := readFrame(c)
	if err != nil {
		return err
	}
	closeFDs(fds)
	switch h.typ {
	case typ:
		return nil
	case frAbort:
		return fmt.Errorf("peer gave up: %s", p)
	}
	return fmt.Errorf("%w: type %d where %d was due", errBadFrame, h.typ, typ)
}

// abortPeer tells the peer why the hand-over failed, if it still
// listens.
func abortPeer(c *net.UnixConn, why error) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	msg := why.Error()
	writeFrame(c, frAbort, []byte(msg[:min(len(msg), 4096)]), nil)
}

// letGo closes s's copies of what went over, after the receiver took
// it: listening sockets close without their queues being taken (they are
// the receiver's now) and Unix socket files stay. s serves nothing any
// more.
func (s *Server) letGo(x *export) {
	// The engine lets go first, without s.mu: a Shutdown begun meanwhile
	// holds it, waiting for a paused event loop. No loop starts watching
	// a listener that went over (a loop's start may be queued behind
	// the pause).
	for _, ln := range x.lns {
		if u, ok := ln.(interface{ stopWatching() }); ok {
			u.stopWatching()
		}
	}
	x.commit()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		close(s.stopping)
	}
	s.closed = true
	s.closeKept()
	s.closeInherited()
	s.log.Info("handed over to another process")
}

// closeKept stops every front and route without draining their sockets,
// which another process reads. s.mu is held.
func (s *Server) closeKept() {
	for _, f := range s.fronts {
		f.closeKept()
	}
	s.fronts = map[string]*front{}
	for _, f := range s.udpFronts {
		f.sock.udp.foreign.Store(true)
		f.close()
	}
	s.udpFronts = map[string]*udpFront{}
	for _, rt := range s.routes {
		if rt.udp != nil {
			rt.udp.foreign.Store(true)
		}
		rt.stop()
		rt.targets().close()
	}
}

// closeKept stops f without taking its listeners' queues.
func (f *front) closeKept() {
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	for _, ln := range f.lns {
		closeKeptListener(ln)
	}
	for _, r := range f.retiring {
		r.t.Stop()
		if !r.closed {
			r.closed = true
			for _, ln := range r.lns {
				closeKeptListener(ln)
			}
		}
	}
	f.retiring = nil
}

// closeKeptListener closes ln without removing its Unix socket file.
func closeKeptListener(ln net.Listener) {
	setUnlink(ln, false)
	ln.Close()
}

// setUnlink sets whether closing ln removes its Unix socket file.
func setUnlink(ln net.Listener, on bool) {
	switch l := ln.(type) {
	case *net.UnixListener:
		l.SetUnlinkOnClose(on)
	case interface{ setUnlink(bool) }:
		l.setUnlink(on)
	}
}
