package relay

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestUnixModeBeforeBind checks what UnixMode's guarantee rests on: under
// an empty umask, a socket given its mode before bind(2) is created with
// that mode, never the 0777 it would otherwise get.
func TestUnixModeBeforeBind(t *testing.T) { forEachEngine(t, testUnixModeBeforeBind) }

func testUnixModeBeforeBind(t *testing.T) {
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

// TestUnixOwner relays through a Unix listen socket given away to another
// owner (root only) and group, by numeric id and by name.
func TestUnixOwner(t *testing.T) { forEachEngine(t, testUnixOwner) }

func testUnixOwner(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	path := filepath.Join(shortTempDir(t), "o.sock")
	wantUID, wantGID := os.Geteuid(), os.Getegid()
	usr, grp := "", strconv.Itoa(wantGID) // any process may choose its own group
	if os.Geteuid() == 0 {
		usr, grp = "65534", "root" // a numeric owner, a group by name
		wantUID, wantGID = 65534, 0
	}
	startRelay(t, route0(path, be.addr, func(r *Route) {
		r.UnixUser, r.UnixGroup, r.UnixMode = usr, grp, 0o660
	}))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != wantUID || int(st.Gid) != wantGID || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket file %v uid %d gid %d; want 0660 uid %d gid %d", fi.Mode(), st.Uid, st.Gid, wantUID, wantGID)
	}
	checkPing(t, path)
}
