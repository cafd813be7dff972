package bench

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/zeroio/zeroio/splice"
	"golang.org/x/sys/unix"
)

// The splice benchmarks follow Go's net/splice_linux_test.go
// (go.dev/cl/113997):
// the peers that write into src and read out of dst are child processes,
// copies of this test binary, holding their socket as fd 3 from
// ExtraFiles, so only the copy runs in the measured process.
//
// The child mode is entered from init rather than TestMain so that it
// does not claim the package's one TestMain from the other suites, and so
// that it works in any binary that imports this package: the zeroio
// command re-executes itself the same way for `zeroio bench`.

const (
	spliceChildEnv = "ZEROIO_SPLICE_CHILD" // "write" or "read"
	spliceBytesEnv = "ZEROIO_SPLICE_BYTES" // how many bytes to move
)

func init() {
	register(Suite{Group: "splice", Name: "Splice", Cases: spliceCases, Metric: "MB/s"})
	mode := os.Getenv(spliceChildEnv)
	if mode == "" {
		return
	}
	total, err := strconv.ParseInt(os.Getenv(spliceBytesEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "splice child:", err)
		os.Exit(2)
	}
	os.Exit(spliceChild(mode, os.NewFile(3, "peer"), total))
}

// spliceChild writes total bytes to f, or reads total bytes (or to EOF)
// from it, in 1 MiB chunks.
func spliceChild(mode string, f *os.File, total int64) int {
	buf := make([]byte, 1<<20)
	for total > 0 {
		b := buf[:min(int64(len(buf)), total)]
		var n int
		var err error
		if mode == "write" {
			n, err = f.Write(b)
		} else {
			n, err = f.Read(b)
		}
		total -= int64(n)
		if err == io.EOF && mode == "read" {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "splice child:", mode, err)
			return 1
		}
	}
	if mode == "write" {
		f.Close()
	}
	return 0
}

// startPeer starts a child that writes or reads total bytes on f.
func startPeer(b *testing.B, mode string, f *os.File, total int64) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		fatal(b, err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), spliceChildEnv+"="+mode, spliceBytesEnv+"="+strconv.FormatInt(total, 10))
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fatal(b, err)
	}
	f.Close() // the child has its copy
	return cmd
}

// streamPair returns our end as a conn and the peer's end as a file for a
// child: a loopback TCP connection or a stream Unix socketpair.
func streamPair(b *testing.B, network string) (net.Conn, *os.File) {
	if network == "unix" {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fatal(b, err)
		}
		ours := os.NewFile(uintptr(fds[0]), "unix")
		c, err := net.FileConn(ours)
		ours.Close()
		if err != nil {
			fatal(b, err)
		}
		return c, os.NewFile(uintptr(fds[1]), "unix-peer")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(b, err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fatal(b, err)
	}
	c, err := ln.Accept()
	if err != nil {
		fatal(b, err)
	}
	f, err := peer.(*net.TCPConn).File()
	peer.Close()
	if err != nil {
		fatal(b, err)
	}
	return c, f
}

// copyBuffer64k is the "reused buffer" baseline: a plain read/write loop
// through one 64 KiB buffer, no ReaderFrom or WriterTo.
func copyBuffer64k(dst io.Writer, src io.Reader, n int64, buf []byte) (int64, error) {
	var written int64
	for written < n {
		nr, er := src.Read(buf[:min(int64(len(buf)), n-written)])
		if nr > 0 {
			nw, ew := dst.Write(buf[:nr])
			written += int64(nw)
			if ew != nil {
				return written, ew
			}
		}
		if er != nil {
			return written, er
		}
	}
	return written, nil
}

var spliceImpls = []struct {
	name string
	copy func(dst io.Writer, src io.Reader, n int64, buf []byte) (int64, error)
}{
	{"stdlib", func(dst io.Writer, src io.Reader, n int64, _ []byte) (int64, error) { return io.CopyN(dst, src, n) }},
	{"buffer64k", copyBuffer64k},
	{"zeroio", func(dst io.Writer, src io.Reader, n int64, _ []byte) (int64, error) { return splice.CopyN(dst, src, n) }},
}

// spliceCases copy size bytes per op between the ends of each pair.
func spliceCases(sc Scale) []Case {
	var cs []Case
	pairs := []struct{ name, src, dst string }{
		{"tcp-to-tcp", "tcp", "tcp"},
		{"unix-to-tcp", "unix", "tcp"},
		{"tcp-to-unix", "tcp", "unix"},
		{"unix-to-unix", "unix", "unix"},
		{"file-to-tcp", "file", "tcp"},
		{"tcp-to-file", "tcp", "file"},
		{"file-to-unix", "file", "unix"},
	}
	for _, p := range pairs {
		for size := 1 << 10; size <= 1<<20; size <<= 2 {
			if sc == Quick && size != 1<<10 && size != 1<<16 ||
				sc == Default && size != 1<<12 && size != 1<<16 && size != 1<<20 {
				continue
			}
			for _, impl := range spliceImpls {
				name := fmt.Sprintf("pair=%s/size=%d/impl=%s", p.name, size, impl.name)
				cs = append(cs, Case{name, func(b *testing.B) {
					benchSplice(b, p.src, p.dst, int64(size), impl.copy)
				}})
			}
		}
	}
	return cs
}

func benchSplice(b *testing.B, srcKind, dstKind string, size int64, copyFn func(io.Writer, io.Reader, int64, []byte) (int64, error)) {
	total := size * int64(b.N)
	var src io.Reader
	var dst io.Writer
	var rewind *os.File // a file end, rewound before each copy
	var peers []*exec.Cmd
	switch srcKind {
	case "file":
		name := filepath.Join(benchDir(b), "src")
		if err := os.WriteFile(name, make([]byte, size), 0o600); err != nil {
			fatal(b, err)
		}
		f, err := os.Open(name)
		if err != nil {
			fatal(b, err)
		}
		defer f.Close()
		src, rewind = f, f
	default:
		c, peer := streamPair(b, srcKind)
		defer c.Close()
		src = c
		peers = append(peers, startPeer(b, "write", peer, total))
	}
	switch dstKind {
	case "file":
		f, err := os.Create(filepath.Join(benchDir(b), "dst"))
		if err != nil {
			fatal(b, err)
		}
		defer f.Close()
		dst, rewind = f, f
	default:
		c, peer := streamPair(b, dstKind)
		defer c.Close()
		dst = c
		peers = append(peers, startPeer(b, "read", peer, total))
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if rewind != nil {
			if _, err := rewind.Seek(0, io.SeekStart); err != nil {
				fatal(b, err)
			}
		}
		if n, err := copyFn(dst, src, size, buf); err != nil || n != size {
			fatalf(b, "copy = %d, %v; want %d", n, err, size)
		}
	}
	b.StopTimer()
	if c, ok := dst.(net.Conn); ok {
		c.Close() // the reader sees EOF
	}
	for _, p := range peers {
		if err := p.Wait(); err != nil {
			fatalf(b, "peer: %v", err)
		}
	}
}

// benchDir returns a directory for the file ends: on tmpfs (/dev/shm)
// where there is one, so disk writeback does not add noise to the copy.
// An interrupted zeroio bench removes it too (StopAll): tmpfs is memory.
func benchDir(b *testing.B) string {
	if dir, err := tempDir("/dev/shm", "zeroio-splice"); err == nil {
		b.Cleanup(func() { removeTempDir(dir) })
		return dir
	}
	return b.TempDir()
}
