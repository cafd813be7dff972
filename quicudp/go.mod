module github.com/zeroio/zeroio/quicudp

go 1.26.0

require (
	github.com/quic-go/quic-go v0.65.0
	github.com/zeroio/zeroio v0.0.0-00010101000000-000000000000
	golang.org/x/net v0.62.0
)

require (
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
