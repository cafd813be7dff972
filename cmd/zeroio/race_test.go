//go:build race

package main

import "time"

// raceEnabled says the tests run with -race: binaries they build get it too.
const raceEnabled = true

// exitBound is how soon after SIGUSR2 the old process of an upgrade must
// have exited: three times the 5 s, for binaries built with
// -race, whose runtime slows every start and exit.
const exitBound = 15 * time.Second
