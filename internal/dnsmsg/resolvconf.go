package dnsmsg

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// resolvConfPath is the file the system's DNS servers are read from.
var resolvConfPath = "/etc/resolv.conf"

// recheck is how often the file's modification time is looked at again,
// as package net's resolver does.
const recheck = 5 * time.Second

// defaultServers are asked when the file names none, or cannot be read,
// as package net's resolver and glibc do: a server on this machine.
var defaultServers = []netip.AddrPort{
	netip.MustParseAddrPort("127.0.0.1:53"),
	netip.MustParseAddrPort("[::1]:53"),
}

// resolvConf is the nameserver lines of /etc/resolv.conf, read again
// when the file changes.
type resolvConf struct {
	mu      sync.Mutex
	checked time.Time
	mtime   time.Time
	list    []netip.AddrPort
}

// servers returns the servers the file names now.
func (rc *resolvConf) servers() []netip.AddrPort {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := time.Now()
	if rc.list != nil && now.Sub(rc.checked) < recheck {
		return rc.list
	}
	rc.checked = now
	fi, err := os.Stat(resolvConfPath)
	if err != nil {
		rc.list, rc.mtime = defaultServers, time.Time{}
		return rc.list
	}
	if rc.list != nil && fi.ModTime().Equal(rc.mtime) {
		return rc.list
	}
	rc.mtime = fi.ModTime()
	rc.list = readResolvConf(resolvConfPath)
	return rc.list
}

// readResolvConf returns the nameservers the file names (port 53), or
// defaultServers when it names none.
func readResolvConf(path string) []netip.AddrPort {
	f, err := os.Open(path)
	if err != nil {
		return defaultServers
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		// A link-local server's zone (fe80::1%eth0) is kept: a dial
		// needs it.
		if ip, err := netip.ParseAddr(fields[1]); err == nil {
			out = append(out, netip.AddrPortFrom(ip.Unmap(), 53))
		}
	}
	if len(out) == 0 {
		return defaultServers
	}
	return out
}
