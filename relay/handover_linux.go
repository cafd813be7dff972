package relay

import (
	"os"
	"strings"
)

// migrateReq reports whether the kernel moves the connections in flight
// on a closing listener to another of its SO_REUSEPORT group
// (net.ipv4.tcp_migrate_req, Linux 5.14; ip-sysctl.rst).
func migrateReq() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
