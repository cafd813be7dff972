//go:build !unix

package relay

import (
	"fmt"
	"net"
	"runtime"
)

// Descriptors cross processes only over Unix sockets (SCM_RIGHTS), which
// this platform lacks: a hand-over fails at once, the sender serving on.

var errNoHandOver = fmt.Errorf("hand-over is not supported on %s", runtime.GOOS)

func writeFrame(*net.UnixConn, uint8, []byte, []int) error { return errNoHandOver }

func readFrame(*net.UnixConn) (frameHeader, []byte, []int, error) {
	return frameHeader{}, nil, nil, errNoHandOver
}

func closeFDs([]int) {}

func udpConnOf(int) (*net.UDPConn, error) { return nil, errNoHandOver }

func rawFD(any) (int, error) { return -1, errNoHandOver }
