package bench

// Peers compared against in this package's benchmarks. Blank imports keep
// them in go.mod while the suites that use them are being written.
import (
	_ "github.com/bytedance/gopkg/lang/mcache"
	_ "github.com/libp2p/go-buffer-pool"
	_ "github.com/valyala/bytebufferpool"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/net/ipv6"
	_ "golang.org/x/perf/benchfmt"
	_ "golang.org/x/sys/unix"
	_ "golang.zx2c4.com/wireguard/conn"
)
