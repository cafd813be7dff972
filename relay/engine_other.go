package relay

// availableEngines lists the engines this platform runs, the default
// first. The event engine is not built yet anywhere; every platform runs
// the goroutine engine.
var availableEngines = []string{EngineGoroutine}

func newPlatformEngine(s *Server, name string) engine { return newGoroutineEngine(s) }
