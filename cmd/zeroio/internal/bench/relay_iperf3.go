package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayImpls are the stream relays compared, "direct" being no relay;
// zeroio-goroutine is the relay package on its goroutine engine, zeroio
// on the platform's default.
var relayImpls = []string{"direct", "zeroio", "zeroio-goroutine", "iocopy", "copy64k", "haproxy", "socat"}

// pacedImpls are zeroio's engines with an upload and download rate of
// pacedRate: their cpu-s/GiB beside the unlimited relay's is what pacing
// costs per byte (its throughput is the rate, by design).
var pacedImpls = []string{"zeroio-paced", "zeroio-goroutine-paced"}

const pacedRate = 512 << 20

// relayIperf3Cases: iperf3 client and server on loopback, through each
// relay, client to server (dir=up) and server to client (dir=down, -R).
// One op is one iperf3 run moving a fixed number of bytes; the metrics
// are iperf3's receiver throughput and the relay process's CPU seconds
// (user+system, children included) per GiB moved.
func relayIperf3Cases(sc Scale) []Case {
	size := int64(1 << 30)
	if sc < Full {
		size = 256 << 20
	}
	var cs []Case
	for _, dir := range []string{"up", "down"} {
		for _, impl := range append(relayImpls[:len(relayImpls):len(relayImpls)], pacedImpls...) {
			if !havePeer(impl) {
				continue
			}
			cs = append(cs, Case{fmt.Sprintf("dir=%s/impl=%s", dir, impl), func(b *testing.B) {
				runIperf3(b, impl, dir == "down", size)
			}})
		}
	}
	return cs
}

func runIperf3(b *testing.B, impl string, reverse bool, size int64) {
	if impl == "haproxy" || impl == "socat" {
		if why := needTools(impl); why != "" {
			skip(b, why)
		}
	}
	port, err := freePort("tcp")
	if err != nil {
		fatal(b, err)
	}
	srvAddr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := exec.Command("iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port))
	srvExited, err := startChild(srv)
	if err != nil {
		fatal(b, err)
	}
	defer func() { srv.Process.Kill(); <-srvExited }()
	if !waitListen(srvAddr) {
		fatal(b, "iperf3 server did not start")
	}
	addr, p := viaRelay(b, impl, "tcp://"+srvAddr)
	defer p.stop()
	pid := 0
	if p != nil {
		pid = p.cmd.Process.Pid
	}
	host, rport, _ := net.SplitHostPort(addr)
	args := []string{"-c", host, "-p", rport, "-n", strconv.FormatInt(size, 10), "-J"}
	if reverse {
		args = append(args, "-R")
	}
	b.ReportAllocs()
	b.SetBytes(size)
	var bytes, secs, cpu float64
	failures := 0
	b.ResetTimer()
	for range b.N {
		c0 := procCPU(pid)
		var res iperfResult
		var err error
		for try := 0; ; try++ {
			if res, err = runIperfClient(args); err == nil {
				break
			}
			// iperf3 now and then loses its control connection at the
			// end of a test through a relay (socat most often), or its
			// server is still ending the previous test ("the server is
			// busy running a test"); the run is retried, after a pause,
			// and counted.
			if try == 2 {
				fatal(b, err)
			}
			failures++
			time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
		}
		if impl == "socat" {
			time.Sleep(50 * time.Millisecond) // let socat reap its forked child, whose CPU then counts
		}
		cpu += procCPU(pid) - c0
		bytes += res.End.SumReceived.Bytes
		secs += res.End.SumReceived.Seconds
	}
	b.StopTimer()
	b.ReportMetric(bytes*8/secs/1e9, "Gbit/s")
	if failures > 0 {
		b.ReportMetric(float64(failures), "retries")
	}
	if pid != 0 {
		b.ReportMetric(cpu/(bytes/(1<<30)), "cpu-s/GiB")
	}
}

type iperfResult struct {
	End struct {
		SumReceived struct {
			Seconds float64 `json:"seconds"`
			Bytes   float64 `json:"bytes"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

func runIperfClient(args []string) (iperfResult, error) {
	var res iperfResult
	out, err := exec.Command("iperf3", args...).Output()
	if jerr := json.Unmarshal(out, &res); jerr != nil && err == nil {
		err = jerr
	}
	if err == nil && res.End.SumReceived.Bytes == 0 {
		err = fmt.Errorf("no bytes received: %s", res.Error)
	}
	if err != nil {
		return res, fmt.Errorf("iperf3 %s: %v", strings.Join(args, " "), err)
	}
	return res, nil
}

func waitListen(addr string) bool { return waitListenOrExit(addr, nil) }

// waitListenOrExit waits up to 10 s for addr to accept a connection, and
// gives up early once exited (the process meant to listen) is closed.
func waitListenOrExit(addr string, exited <-chan struct{}) bool {
	return waitOrExit(exited, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// waitOrExit polls ready every 10 ms for up to 10 s, and gives up early
// once exited (the process it waits for) is closed.
func waitOrExit(exited <-chan struct{}, ready func() bool) bool {
	for range 1000 {
		if ready() {
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

// procCPU returns a process's user+system CPU seconds, including waited-for
// children (proc(5): utime, stime, cutime, cstime), or 0 for pid 0.
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the parenthesized command name, which may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} { // fields 14-17, 1-based, less the first two
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ticks / 100 // USER_HZ is 100 on Linux
}

// procCPUNs returns the CPU time of a process's threads in nanoseconds,
// the sum of the first field of each /proc/PID/task/TID/schedstat
// (proc(5)), or 0 for pid 0. Threads that exited are not counted: the
// relays measured keep theirs for their life.
func procCPUNs(pid int) int64 {
	return sumThreads(pid, "schedstat", func(s string) int64 {
		if f := strings.Fields(s); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			return v
		}
		return 0
	})
}

// procSwitches returns how many times a process's threads have been
// switched out, voluntarily (to wait) or not (preempted): the sum of
// voluntary_ctxt_switches and nonvoluntary_ctxt_switches in each
// /proc/PID/task/TID/status (proc(5)), or 0 for pid 0. Threads that
// exited are not counted.
func procSwitches(pid int) int64 {
	return sumThreads(pid, "status", func(s string) int64 {
		var n int64
		for _, l := range strings.Split(s, "\n") {
			k, v, ok := strings.Cut(l, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
		return n
	})
}

// sumThreads sums count over the file name of each of a process's threads
// (/proc/PID/task/TID/name), or 0 for pid 0. A thread that exits while it
// is read is not counted.
func sumThreads(pid int, name string, count func(string) int64) int64 {
	if pid == 0 {
		return 0
	}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	es, _ := os.ReadDir(dir)
	var n int64
	for _, e := range es {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/" + name)
		if err != nil {
			continue // the thread just exited
		}
		n += count(string(b))
	}
	return n
}

// procStatus returns a /proc/PID/status field in kB (VmRSS).
func procStatus(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return n
		}
	}
	return 0
}

// procPipes counts the pipe descriptors a process holds.
func procPipes(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, _ := os.ReadDir(dir)
	n := 0
	for _, e := range es {
		if l, _ := os.Readlink(dir + "/" + e.Name()); strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}
