package relay

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestUnixModeBeforeBind checks what UnixMode's guarantee rests on: under
// an empty umask, a socket given its mode before bind(2) is created with
// that mode, never the 0777 it would otherwise get.
func TestUnixModeBeforeBind(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(shortTempDir(t), "b.sock")
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return setSocketMode(c, 0o600) }}
	ln, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bound with mode %v, %v; want 0600", fi.Mode(), err)
	}
}
