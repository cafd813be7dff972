package relay

import (
	"sync"
	"sync/atomic"
)

// The event engine's part of Server.Streams and CloseStream: each loop
// owns its connections, so each looks at its own, on its goroutine.

// onLoops runs f on every loop, each on its own goroutine, and waits for
// all. Once the engine is closed it runs nothing: its loops may have
// stopped, and a posted function would never run. Posting under e.mu
// while it is open queues f before the stop that close posts.
func (e *eventEngine) onLoops(f func(l *loop)) {
	var wg sync.WaitGroup
	e.mu.Lock()
	if !e.closed.Load() {
		for _, l := range e.loops {
			wg.Add(1)
			l.post(func() { f(l); wg.Done() })
		}
	}
	e.mu.Unlock()
	wg.Wait()
}

func (e *eventEngine) streams(after uint64, limit int, now int64) []StreamInfo {
	var mu sync.Mutex
	var out []StreamInfo
	e.onLoops(func(l *loop) {
		var mine []StreamInfo
		for _, c := range l.conns {
			if c.state != stFree && c.id > after {
				mine = append(mine, c.info(c.upN, c.downN, now))
			}
		}
		mine = firstStreams(mine, limit)
		mu.Lock()
		out = append(out, mine...)
		mu.Unlock()
	})
	return out
}

func (e *eventEngine) closeStream(id uint64) bool {
	var found atomic.Bool
	e.onLoops(func(l *loop) {
		for _, c := range l.conns {
			if c.state != stFree && c.id == id {
				c.finish(errAdminClose)
				found.Store(true)
				return
			}
		}
	})
	return found.Load()
}
