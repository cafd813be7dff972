//go:build !unix

package main

import (
	"errors"
	"os"
	"runtime"
)

// upgradeSignal is nil: there is no SIGUSR2 on this platform.
var upgradeSignal os.Signal

func startNew(string, []auxListener) (*newProcess, error) {
	return nil, errors.New("live upgrade is not supported on " + runtime.GOOS)
}
