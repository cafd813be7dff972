package relay

// What tests ask of the event engine (see testEngine).

// inFlight lists the connections in flight.
func (e *eventEngine) inFlight() []connInfo {
	if e.closed.Load() {
		return nil
	}
	var out []connInfo
	for _, lp := range e.started() {
		lp.call(func() {
			for _, c := range lp.conns {
				if c.state != stFree {
					out = append(out, connInfo{client: c.cfd, target: c.tfd, dialing: c.state == stDialing})
				}
			}
		})
	}
	return out
}

// holding reports the buffers and pipes the loops' relays hold now, and
// the pipes they ever took.
func (e *eventEngine) holding() (bufs, pipes, pipesTaken int64, ok bool) {
	if e.closed.Load() {
		return 0, 0, 0, true
	}
	for _, lp := range e.started() {
		lp.call(func() {
			bufs += lp.bufs.Held
			pipes += lp.pipes.Held
			pipesTaken += lp.pipes.Taken
		})
	}
	return bufs, pipes, pipesTaken, true
}
