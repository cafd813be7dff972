//go:build !linux

package bench

// kernelGRO: UDP_GRO is Linux's.
func kernelGRO() bool { return false }
