package relay

import (
	"errors"
	"sync"
	"time"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// The event engine's part of a hand-over: every stream goes over.
//
// The sender's loops pause at a safe point, between two turns (a function
// posted to each runs after the turn's events, retries and timers) and
// stay in it, blocked, until the hand-over is decided: nothing is
// accepted and no byte moves meanwhile; epoll keeps the events that come
// for the next turn. Each loop writes a record of each of its streams;
// the descriptors (sockets, and the pipes that hold bytes) stay open in
// the sender until it lets go, so a failed hand-over resumes with
// everything as it was. Letting go, each loop stops watching the
// listeners and closes its copies of its streams' descriptors, which
// leave its slab without ending: no end is counted or logged for them.

// freeze pauses every loop and adds its streams to x; x.resume and
// x.commit end the pause. The Server's mu is held.
func (e *eventEngine) freeze(x *export) error {
	if e.closed.Load() {
		return errors.New("the event loops have stopped")
	}
	loops := e.started()
	if len(x.lns) > 0 {
		// Started now if the listeners' accept loops have not yet
		// started them, so that none starts after the pause.
		loops = e.start()
	}
	snaps := make(chan *export, len(loops))
	decide := make([]chan bool, len(loops))
	var wg, pausing sync.WaitGroup
	paused := make(chan struct{})
	pausing.Add(len(loops))
	go func() { pausing.Wait(); close(paused) }()
	for i, lp := range loops {
		d := make(chan bool, 1)
		decide[i] = d
		wg.Add(1)
		lp.post(func() {
			defer wg.Done()
			// Once every loop has paused, none hands another a
			// client: those handed before are taken now, to go over
			// with the rest.
			pausing.Done()
			select {
			case <-paused:
				lp.inbox.Drain(lp.serveHanded)
			case <-time.After(handOverStep):
			}
			lx := &export{}
			lp.exportConns(lx)
			snaps <- lx
			if <-d {
				lp.letGo()
			}
		})
	}
	finish := func(commit bool) {
		for _, d := range decide {
			d <- commit
		}
		wg.Wait()
	}
	t := time.NewTimer(handOverStep)
	defer t.Stop()
	for range loops {
		select {
		case lx := <-snaps:
			x.frames = append(x.frames, lx.frames...)
			x.records += lx.records
			x.nfds += lx.nfds
		case <-t.C:
			finish(false)
			return errors.New("an event loop did not pause in time")
		}
	}
	x.resume = func() { finish(false) }
	x.commit = func() { finish(true) }
	return nil
}

// exportConns adds a record of each of l's streams to x.
func (l *loop) exportConns(x *export) {
	now := mono()
	for _, c := range l.conns {
		if c.state != stFree {
			r, fds := c.record(now)
			x.add(recStream, fds, r.append)
		}
	}
}

// record describes c for the receiver, with the descriptors that go
// with it.
func (c *evConn) record(now int64) (streamRec, []int) {
	r := streamRec{src: c.src, dst: c.dst, dstKnown: c.dstKnown, proxied: c.proxied, age: max(now-c.start, 0)}
	f := c.front
	if c.rt != nil {
		r.route = c.rt.name
		if f == nil {
			f = c.rt.front
		}
	}
	if f != nil {
		r.front = f.table.Load().routes[0].name
	}
	fds := []int{c.cfd}
	if c.state != stRelay {
		// The prelude: the client and what it sent, to be taken
		// through it again; a dial under way is dropped.
		d := &c.up
		r.up = dirRec{eof: d.eof, rerr: uint32(d.rerr)}
		if d.end > d.off {
			r.up.buf = d.buf[d.off:d.end]
		}
		return r, fds
	}
	r.relaying, r.perClient = true, c.perClient
	r.target = c.b.addr
	r.upN, r.downN, r.endFirst = c.upN, c.downN, uint8(c.endFirst)
	r.idle, r.idleFor = int64(c.cfg.IdleTimeout), max(now-c.last, 0)
	r.cHup, r.tHup = c.cHup, c.tHup
	fds = append(fds, c.tfd)
	r.up = c.up.record(&fds)
	r.down = c.down.record(&fds)
	r.pace = c.pace.record(c.cfg, now)
	return r, fds
}

// record describes p, a stream's limits under settings r, at now.
func (p *pacing) record(r *Route, now int64) paceRec {
	pr := paceRec{rates: [4]uint64{uint64(r.UploadRate), uint64(r.DownloadRate), uint64(r.ClientUploadRate), uint64(r.ClientDownloadRate)}}
	if p.end != 0 {
		pr.endIn = max(p.end-now, 1) // past due: at once
	}
	for d := range 2 {
		if p.tat[d] != 0 {
			pr.tatIn[d] = p.tat[d] - now
		}
		if p.wait[d] != 0 {
			pr.waitIn[d] = max(p.wait[d]-now, 1)
		}
	}
	return pr
}

// resume takes a stream's limits over from pr at now: c.cfg has its
// rates, and startPacing has pinned its client's shared buckets.
func (p *pacing) resume(pr *paceRec, now int64) {
	p.end = 0
	if pr.endIn != 0 {
		p.end = now + pr.endIn
	}
	for d := range 2 {
		if pr.tatIn[d] != 0 {
			p.tat[d] = now + pr.tatIn[d]
		}
		if pr.waitIn[d] != 0 {
			p.wait[d], p.since[d] = now+pr.waitIn[d], now
		}
	}
}

// record describes d, adding its pipe to fds if it holds bytes.
func (d *dir) record(fds *[]int) dirRec {
	r := dirRec{hdr: d.hdr, full: d.full, spliced: d.spliced, eof: d.eof, shut: d.shut, rerr: uint32(d.rerr)}
	if d.end > d.off {
		r.buf = d.buf[d.off:d.end]
	}
	if d.hasPipe && d.inPipe > 0 {
		r.hasPipe, r.inPipe = true, uint32(d.inPipe)
		*fds = append(*fds, d.pipe.R, d.pipe.W)
	}
	return r
}

// letGo stops l watching its listeners and closes its copies of the
// streams that went over.
func (l *loop) letGo() {
	for i, ll := range l.lns {
		if ll != nil {
			l.resume(ll)
			l.p.Del(ll.fd)
			l.lns[i] = nil
		}
	}
	for _, c := range l.conns {
		if c.state != stFree {
			c.handedOff()
		}
	}
}

// handedOff frees c, which another process serves now: its slots and
// its target's count are given back, its descriptors closed (pipes
// too, never reused: the other process reads them).
func (c *evConn) handedOff() {
	l := c.lp
	l.wheel.disarm(c)
	c.unpark()
	nbsys.Close(c.cfd)
	if c.tfd >= 0 {
		nbsys.Close(c.tfd)
	}
	for _, d := range []*dir{&c.up, &c.down} {
		if d.hasPipe {
			l.pipes.Put(d.pipe, 1)
			d.hasPipe = false
		}
		d.release(l)
	}
	c.plan.abandon()
	if c.relaying {
		c.b.connEnd(c.upN, c.downN)
		c.stopPacing()
	}
	if c.release() {
		l.freed = true
	}
	*c = evConn{lp: l, idx: c.idx, cfd: -1, tfd: -1}
	l.freeConn(c)
	l.e.s.connWG.Done()
}

// adoptStreams serves the streams a hand-over brought, each on the
// least loaded loop. The Server's mu is held.
func (e *eventEngine) adoptStreams(ts []*takenStream) {
	loops := e.start()
	for _, t := range ts {
		if len(loops) == 0 { // out of descriptors when they started
			closeFDs(t.fds)
			if t.rec.relaying {
				t.rt.releaseSlots(t.rec.perClient, t.rec.src.Addr())
			}
			continue
		}
		lp := leastLoaded(loops)
		lp.queued.Add(1)
		e.s.connWG.Add(1)
		lp.post(func() {
			lp.queued.Add(-1)
			if t.rec.relaying {
				lp.adoptRelay(t)
			} else {
				lp.adoptPrelude(t)
			}
		})
	}
}

// adoptRelay serves a stream that was relaying, as it was, in the slots
// resolveTaken took for it.
func (l *loop) adoptRelay(t *takenStream) {
	r, rt := &t.rec, t.rt
	c := l.newConn()
	cfg := *rt.cfg.Load()
	cfg.IdleTimeout = time.Duration(r.idle)
	cfg.UploadRate, cfg.DownloadRate = ByteRate(r.pace.rates[0]), ByteRate(r.pace.rates[1])
	cfg.ClientUploadRate, cfg.ClientDownloadRate = ByteRate(r.pace.rates[2]), ByteRate(r.pace.rates[3])
	cfg.MaxDuration = 0 // its deadline comes with it
	c.rt, c.cfg = rt, &cfg
	c.src, c.dst, c.dstKnown, c.proxied, c.perClient = r.src, r.dst, r.dstKnown, r.proxied, r.perClient
	c.start, c.last = l.now-r.age, l.now-r.idleFor
	c.upN, c.downN, c.endFirst = r.upN, r.downN, endReason(r.endFirst)
	c.cfd, c.tfd = t.fds[0], t.fds[1]
	pipes := t.fds[2:]
	c.up = l.dirOf(&r.up, &pipes)
	c.down = l.dirOf(&r.down, &pipes)
	c.relayTo(t.b)
	c.state = stRelay
	c.cHup, c.tHup = r.cHup, r.tHup
	// Registration reports what is ready now (epoll_ctl(2) with
	// EPOLLET queues an event for a ready socket); the first pump
	// finds out anyway.
	c.cR, c.cW, c.tR, c.tW = true, true, true, true
	e := l.register(c, c.cfd, false)
	if e == 0 {
		e = l.register(c, c.tfd, true)
	}
	if e != 0 {
		c.finish(e)
		return
	}
	c.startPacing(l.now)
	c.pace.resume(&r.pace, l.now)
	c.armRelay()
	c.pumpAll()
}

// dirOf rebuilds a direction from its record, taking its pipe from
// pipes.
func (l *loop) dirOf(r *dirRec, pipes *[]int) dir {
	d := dir{hdr: r.hdr, full: r.full, spliced: r.spliced, eof: r.eof, shut: r.shut, rerr: unix.Errno(r.rerr)}
	if len(r.buf) > 0 {
		d.buf = l.getBufN(max(len(r.buf), bufSize))
		d.end = copy(d.buf, r.buf)
	}
	if r.hasPipe {
		d.pipe, d.hasPipe, d.inPipe = evloop.Pipe{R: (*pipes)[0], W: (*pipes)[1]}, true, int(r.inPipe)
		*pipes = (*pipes)[2:]
		l.pipes.Adopt()
	}
	return d
}

// adoptPrelude takes a client that was in its prelude through it again,
// with the bytes it sent so far: the hello's route choice if no route
// took it (or its route is gone), else its route's limits, then policy
// and the dial.
func (l *loop) adoptPrelude(t *takenStream) {
	r, rt, f, fd := &t.rec, t.rt, t.f, t.fds[0]
	s := l.e.s
	if f == nil && rt != nil {
		f = rt.front
	}
	if f == nil {
		nbsys.Close(fd)
		s.connWG.Done()
		return
	}
	tbl := f.table.Load()
	if rt == nil && !tbl.needsHello() {
		rt = tbl.only()
	}
	c := l.newConn()
	c.cfd, c.src, c.dst, c.dstKnown, c.proxied = fd, r.src, r.dst, r.dstKnown, r.proxied
	c.start = l.now - r.age
	c.up = dir{eof: r.up.eof, rerr: unix.Errno(r.up.rerr)}
	if n := len(r.up.buf); n > 0 {
		// The buffer the prelude would have: a hello's, or a
		// PROXY header's (which readProxy fills up to bufSize).
		size := bufSize
		if rt == nil || n > bufSize-proxyReserve {
			size = helloBufSize
		}
		if n > size-proxyReserve || !c.proxied && n > bufSize-proxyReserve {
			c.finish(errQuiet)
			return
		}
		c.up.buf = l.getBufN(size)
		c.up.end = copy(c.up.buf, r.up.buf)
	}
	c.cR = true
	if rt != nil {
		c.cfg, c.state = rt.cfg.Load(), stSlot
		if e := l.register(c, fd, false); e != 0 {
			c.finish(errQuiet)
			return
		}
		c.takeOrPark(rt, true)
		return
	}
	l.helloAgain(c, f, tbl)
}

// helloAgain has c, a client of f, read its hello (and PROXY header)
// again, as accepted does, from the bytes it holds.
func (l *loop) helloAgain(c *evConn, f *front, tbl *routeTable) {
	srv := l.e.s
	cfg := tbl.routes[0].cfg.Load()
	c.front, c.table, c.cfg, c.state = f, tbl, cfg, stHello
	c.peekSlot = true
	if !srv.admitPeek() {
		srv.active.Add(1) // over the limit, as a client handed from a closed listener
	}
	if e := l.register(c, c.cfd, false); e != 0 {
		c.finish(errQuiet)
		return
	}
	if !c.awaitHello(cfg) {
		return
	}
	if c.state == stProxy {
		c.readProxy()
	} else {
		c.readHello()
	}
}
