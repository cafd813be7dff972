//go:build !linux

package relay

// availableEngines lists the engines this platform runs, the default
// first: the event engine is Linux-only (epoll), so here it is the
// goroutine engine alone.
var availableEngines = []string{EngineGoroutine}

func newPlatformEngine(s *Server, name string) engine { return newGoroutineEngine(s) }
