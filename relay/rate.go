package relay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConnRate is a rate of new connections (UDP sessions): N per Per. The
// zero ConnRate is no limit. Written as text it is "10/s", "600/m" or
// "5000/h" (see [ParseConnRate]).
type ConnRate struct {
	N   int
	Per time.Duration
}

// ParseConnRate parses a connection rate: a positive integer, a slash
// and a unit, s (per second), m (per minute) or h (per hour): "10/s",
// "600/m". "none" is the zero ConnRate, no limit.
func ParseConnRate(s string) (ConnRate, error) {
	if s == "none" {
		return ConnRate{}, nil
	}
	num, unit, ok := strings.Cut(s, "/")
	per, known := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	n, err := strconv.Atoi(num)
	if !ok || !known || err != nil || n <= 0 || num[0] == '+' {
		return ConnRate{}, fmt.Errorf("connection rate %q: want a positive count per s, m or h (10/s, 600/m), or none", s)
	}
	return ConnRate{N: n, Per: per}, nil
}

// String returns r in the form ParseConnRate reads, or "none".
func (r ConnRate) String() string {
	switch {
	case r.N == 0:
		return "none"
	case r.Per == time.Second:
		return fmt.Sprintf("%d/s", r.N)
	case r.Per == time.Minute:
		return fmt.Sprintf("%d/m", r.N)
	case r.Per == time.Hour:
		return fmt.Sprintf("%d/h", r.N)
	}
	return fmt.Sprintf("%d/%v", r.N, r.Per)
}

// ByteRate is a rate in bytes per second; 0 is no limit. Written as
// text it is "2MiB/s", "500KB/s" (see [ParseByteRate]).
type ByteRate int64

// byteUnits are the units ParseByteRate takes: decimal (SI) and binary
// (IEC) multiples of a byte.
var byteUnits = map[string]float64{
	"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
}

// maxByteRate is the largest ByteRate: the pacing arithmetic, in
// nanoseconds, stays within an int64 up to it.
const maxByteRate = 64 << 30

// ParseByteRate parses a byte rate: a positive number (a decimal
// fraction is allowed), a unit, B, KB, MB, GB (powers of 1000) or KiB,
// MiB, GiB (powers of 1024), and "/s": "2MiB/s", "500KB/s", "1.5GB/s".
// The rate must come to at least 1 B/s. "none" is 0, no limit.
func ParseByteRate(s string) (ByteRate, error) {
	if s == "none" {
		return 0, nil
	}
	bad := fmt.Errorf("byte rate %q: want a positive number of B, KB, MB, GB, KiB, MiB or GiB per second (2MiB/s, 500KB/s), or none", s)
	amount, ok := strings.CutSuffix(s, "/s")
	if !ok {
		return 0, bad
	}
	i := strings.IndexFunc(amount, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, bad
	}
	mult, known := byteUnits[amount[i:]]
	v, err := strconv.ParseFloat(amount[:i], 64)
	if !known || err != nil {
		return 0, bad
	}
	v *= mult
	switch {
	case v < 1:
		return 0, fmt.Errorf("byte rate %q: less than 1 B/s", s)
	case v > maxByteRate:
		return 0, fmt.Errorf("byte rate %q: more than the most, 64GiB/s", s)
	}
	return ByteRate(v), nil
}

// String returns r in the form ParseByteRate reads, in the largest
// binary unit that divides it, or "none".
func (r ByteRate) String() string {
	if r == 0 {
		return "none"
	}
	for _, u := range []string{"GiB", "MiB", "KiB"} {
		if m := int64(byteUnits[u]); int64(r)%m == 0 {
			return fmt.Sprintf("%d%s/s", int64(r)/m, u)
		}
	}
	return fmt.Sprintf("%dB/s", int64(r))
}

// validateLimits checks r's rates and maximum duration.
func (r *Route) validateLimits(bad func(string, ...any)) {
	if c := r.ConnRatePerClient; c != (ConnRate{}) && (c.N <= 0 || c.Per <= 0) {
		bad("connection rate per client %d per %v: want a positive count and period", c.N, c.Per)
	}
	for _, b := range []ByteRate{r.UploadRate, r.DownloadRate, r.ClientUploadRate, r.ClientDownloadRate} {
		if b < 0 || b > maxByteRate {
			bad("byte rate %d B/s: want 0 (none) up to 64GiB/s", int64(b))
		}
	}
	if r.MaxDuration < 0 {
		bad("max duration %v is negative (0 is never)", r.MaxDuration)
	}
}

var errMaxDuration = errors.New("relay: max duration")
