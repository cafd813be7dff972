//go:build !unix

package main

import (
	"errors"
	"os"
)

// listenFDs refuses socket activation, a Unix protocol (sd_listen_fds(3)),
// when the environment asks for it, and otherwise returns nothing.
func listenFDs() ([]*os.File, []string, error) {
	if os.Getenv("LISTEN_FDS") != "" {
		os.Unsetenv("LISTEN_FDS")
		return nil, nil, errors.New("LISTEN_FDS is set, but socket activation is not supported on this platform")
	}
	return nil, nil, nil
}
