package relay_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/zeroio/zeroio/relay"
)

// Hand a running server over to another one, as a new binary would take
// it over from the old over a Unix socket (here both ends are in one
// process): the client connected before keeps its connection.
func ExampleServer_HandOver() {
	backend, _ := net.Listen("tcp", "127.0.0.1:0")
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { buf := make([]byte, 64); n, _ := c.Read(buf); c.Write(buf[:n]); c.Close() }()
		}
	}()
	listen, _ := relay.ParseAddr("tcp://127.0.0.1:0")
	target, _ := relay.ParseAddr("tcp://" + backend.Addr().String())
	cfg := relay.Config{Routes: []relay.Route{{Name: "web", Listen: listen, Target: target}}}
	old, _ := relay.New(cfg)
	if err := old.Start(); err != nil {
		fmt.Println(err)
		return
	}
	client, _ := net.Dial("tcp", old.Addrs("web")[0].String())
	defer client.Close()

	// The new process's configuration names the port the old one has.
	cfg.Routes[0].Listen.Address = old.Addrs("web")[0].String()
	fds, _ := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	ends := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "")
		c, _ := net.FileConn(f)
		f.Close()
		ends[i] = c.(*net.UnixConn)
		defer c.Close()
	}
	errc := make(chan error, 1)
	go func() { errc <- old.HandOver(ends[0]) }()
	srv, err := relay.TakeOver(cfg, ends[1])
	if err := <-errc; err != nil {
		fmt.Println(err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	old.Shutdown(context.Background()) // its streams went over: nothing to wait for

	client.Write([]byte("still connected"))
	buf := make([]byte, 64)
	n, _ := client.Read(buf)
	fmt.Println(string(buf[:n]))
	// Output: still connected
}
