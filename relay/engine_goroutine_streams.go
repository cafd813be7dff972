package relay

// The goroutine engine's part of Server.Streams and CloseStream: its
// registry of pairs (goroutineEngine.conns) under the Server's mu, each
// pair showing the copy of its stream it published at its last step.

// publish makes p's stream as it is now the one Streams shows. Only p's
// own goroutine calls it, at the steps that change what is shown: the
// route known, the target connected.
func (p *pair) publish() {
	st := p.stream
	p.seen.Store(&st)
}

func (e *goroutineEngine) streams(after uint64, limit int, now int64) []StreamInfo {
	var out []StreamInfo
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	for p := range e.conns {
		if p.id <= after {
			continue
		}
		if st := p.seen.Load(); st != nil {
			out = append(out, st.info(p.upA.Load(), p.downA.Load(), now))
		}
	}
	return out
}

func (e *goroutineEngine) closeStream(id uint64) bool {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	for p := range e.conns {
		if p.id == id {
			p.abort(errAdminClose)
			return true
		}
	}
	return false
}
