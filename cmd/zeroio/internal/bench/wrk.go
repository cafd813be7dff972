package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// wrkThreads is wrk's thread count. One: on 2 CPUs a second client thread
// takes CPU from the relay being measured, and one wrk thread drives more
// requests per second than any relay here passes on.
const wrkThreads = 1

// wrkResult is what the HTTP suite reads from wrk's report.
type wrkResult struct {
	Requests float64       // completed requests
	Seconds  float64       // the run's length as wrk measured it
	P99      time.Duration // from --latency's distribution
	// Errors counts socket errors (connect, read, write, timeout);
	// Non2xx responses with another status.
	Errors, Non2xx float64
}

// runWrk runs wrk against url with conns connections for whole seconds,
// with Connection: close on every request if closeEach.
func runWrk(url string, conns int, secs int, closeEach bool) (wrkResult, error) {
	args := []string{"-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", secs),
		// A slow response is a latency, not an error.
		"--timeout", "10s", "--latency"}
	if closeEach {
		args = append(args, "-H", "Connection: close")
	}
	args = append(args, url)
	out, err := exec.Command("wrk", args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("wrk %s: %v", strings.Join(args, " "), err)
	}
	return r, nil
}

// parseWrk reads wrk 4's report (run with --latency):
//
//	Latency Distribution
//	   50%  449.00us
//	   99%    1.14ms
//	261522 requests in 2.00s, 301.23MB read
//	Socket errors: connect 0, read 3, write 0, timeout 0
//	Non-2xx or 3xx responses: 5
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var haveReq, haveP99 bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "99%":
			d, err := parseWrkDuration(f[1])
			if err != nil {
				return r, err
			}
			r.P99, haveP99 = d, true
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			n, err1 := strconv.ParseFloat(f[0], 64)
			d, err2 := parseWrkDuration(strings.TrimSuffix(f[3], ","))
			if err := errors.Join(err1, err2); err != nil {
				return r, fmt.Errorf("requests line %q: %v", sc.Text(), err)
			}
			r.Requests, r.Seconds, haveReq = n, d.Seconds(), true
		case len(f) >= 3 && f[0] == "Socket" && f[1] == "errors:":
			// connect N, read N, write N, timeout N
			for i := 2; i+1 < len(f); i += 2 {
				n, err := strconv.ParseFloat(strings.TrimSuffix(f[i+1], ","), 64)
				if err != nil {
					return r, fmt.Errorf("socket errors line %q: %v", sc.Text(), err)
				}
				r.Errors += n
			}
		case len(f) == 5 && strings.Join(f[:4], " ") == "Non-2xx or 3xx responses:":
			n, err := strconv.ParseFloat(f[4], 64)
			if err != nil {
				return r, fmt.Errorf("non-2xx line %q: %v", sc.Text(), err)
			}
			r.Non2xx = n
		}
	}
	switch {
	case !haveReq:
		return r, errors.New("no \"N requests in T\" line in its report")
	case !haveP99:
		return r, errors.New("no 99% latency in its report (run with --latency)")
	case r.Seconds <= 0:
		return r, errors.New("a run of no time")
	}
	return r, nil
}

// parseWrkDuration reads wrk's durations: 449.00us, 1.14ms, 2.00s, 1.02m,
// 1.00h.
func parseWrkDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		d      time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 {
				return 0, fmt.Errorf("bad duration %q", s)
			}
			return time.Duration(x * float64(u.d)), nil
		}
	}
	return 0, fmt.Errorf("bad duration %q", s)
}
