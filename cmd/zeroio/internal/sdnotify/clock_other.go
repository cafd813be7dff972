//go:build !linux

package sdnotify

// monotonicUsec is only meaningful to systemd, which runs on Linux.
func monotonicUsec() int64 { return 0 }
