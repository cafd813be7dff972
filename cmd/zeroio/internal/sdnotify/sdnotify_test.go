package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotifyPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	if err := Notify(MainPID(42), Ready); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "MAINPID=42\nREADY=1" {
		t.Fatalf("got %q", got)
	}
}

func TestNotifyAbstract(t *testing.T) {
	name := "zeroio-sdnotify-test-" + strings.ReplaceAll(t.TempDir(), "/", "-")
	c := listen(t, "\x00"+name)
	t.Setenv("NOTIFY_SOCKET", "@"+name)
	if err := Notify(Reloading, MonotonicUsec()); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("got %q", got)
	}
}

func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify(Ready); err != nil {
		t.Fatal(err)
	}
}

func TestNotifyErrors(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if err := Notify(Ready); err == nil {
		t.Fatal("relative NOTIFY_SOCKET accepted")
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody"))
	if err := Notify(Ready); err == nil {
		t.Fatal("no error for a socket nobody listens on")
	}
	if got := Status("a\nb"); got != "STATUS=a b" {
		t.Fatalf("Status: %q", got)
	}
}
