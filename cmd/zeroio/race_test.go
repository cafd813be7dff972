//go:build race

package main

// raceEnabled says the tests run with -race: binaries they build get it too.
const raceEnabled = true
