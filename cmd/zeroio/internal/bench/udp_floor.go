package bench

import (
	"bufio"
	_ "embed"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// udpFloorSource is a minimal C sender and receiver (see the file's
// comment): the floor of the UDP suites. impl=c-floor sends with GSO, one
// contiguous iovec per UDP_SEGMENT send, and receives with GRO into 64 KiB
// buffers, udpFloorGROBufs per recvmmsg; impl=c-mmsg is the plain sendmmsg and
// recvmmsg pair. They move the same datagrams as the Go impls (size,
// count, batches, window, socket buffers, both ends on loopback), in a
// process of their own.
//
//go:embed testdata/udpfloor/udp.c
var udpFloorSource []byte

var udpFloor = newCProgram(&cProgram{name: "c-floor", src: udpFloorSource, file: "udp.c"}, "udpfloor")

// udpFloorGROBufs is how many 64 KiB GRO buffers the C receiver reads per
// recvmmsg: 2, as many as a zeroio read of 128 Messages spans. Runs of the
// C program with 3, 4, 8 and 16 (its GROBUFS argument) cost more CPU per
// datagram, not less: the floor takes the cheapest.
const udpFloorGROBufs = 2

// udpFloorImpls are the C impls of the UDP suites: name and the program's
// mode.
var udpFloorImpls = []struct{ name, mode string }{
	{"c-floor", "gso"},
	{"c-mmsg", "mmsg"},
}

// udpFloorNotes says which C impls the UDP suites left out, and why.
func udpFloorNotes() []string {
	if why := udpFloor.whyNot(); why != "" {
		return []string{"skipped " + why + " and c-mmsg"}
	}
	return nil
}

// udpFloorResult is what one run of the C program reports.
type udpFloorResult struct {
	elapsedNs, delivered, lastNs, cpuNs int64
}

// runUDPFloor runs b.N rounds (pattern "pingpong": batch datagrams sent
// and read back) or b.N datagrams (pattern "stream") of size bytes through
// the C program in mode, timing only the run itself: the program sets its
// sockets up, says READY, and starts when told.
func runUDPFloor(b *testing.B, mode, pattern string, size, batch int) udpFloorResult {
	exe, err := udpFloor.build()
	if err != nil {
		skip(b, err.Error())
	}
	b.StopTimer()
	cmd := exec.Command(exe, mode, pattern, strconv.Itoa(size), strconv.Itoa(batch), strconv.Itoa(b.N),
		strconv.Itoa(udpSockBuf), strconv.Itoa(udpFloorGROBufs))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		fatal(b, err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		fatal(b, err)
	}
	exited, err := startChild(cmd)
	if err != nil {
		fatal(b, err)
	}
	defer func() {
		in.Close()
		<-exited
	}()
	out := bufio.NewScanner(outPipe)
	if !out.Scan() || out.Text() != "READY" {
		fatalf(b, "%s: did not start: %s", udpFloor.name, strings.TrimSpace(stderr.String()))
	}
	b.StartTimer()
	if _, err := in.Write([]byte("go\n")); err != nil {
		fatal(b, err)
	}
	var r udpFloorResult
	ok := out.Scan()
	b.StopTimer()
	if ok {
		_, err = fmt.Sscanf(out.Text(), "DONE %d %d %d %d", &r.elapsedNs, &r.delivered, &r.lastNs, &r.cpuNs)
	}
	if !ok || err != nil {
		fatalf(b, "%s %s %s: %q %v: %s", udpFloor.name, mode, pattern, out.Text(), err, strings.TrimSpace(stderr.String()))
	}
	return r
}
