package bench

import "golang.org/x/sys/unix"

// kernelGRO probes the kernel for UDP_GRO (Linux 5.0).
func kernelGRO() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
}
