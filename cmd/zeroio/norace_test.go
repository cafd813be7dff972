//go:build !race

package main

import "time"

// raceEnabled says the tests run with -race: binaries they build get it too.
const raceEnabled = false

// exitBound is how soon after SIGUSR2 the old process of an upgrade must
// have exited.
const exitBound = 5 * time.Second
