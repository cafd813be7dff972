module github.com/zeroio/zeroio

go 1.26.0

require (
	github.com/bytedance/gopkg v0.1.4
	github.com/libp2p/go-buffer-pool v0.1.0
	github.com/valyala/bytebufferpool v1.0.0
	golang.org/x/net v0.62.0
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
	golang.org/x/sys v0.49.0
	golang.zx2c4.com/wireguard v0.0.0-20260522210424-ecfc5a8d5446
)

require github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
