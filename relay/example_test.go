package relay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// Relay a local TCP port to a backend, then shut down gracefully.
func Example() {
	backend, _ := net.Listen("tcp", "127.0.0.1:0")
	defer backend.Close()
	go func() {
		c, _ := backend.Accept()
		io.WriteString(c, "hello from the backend")
		c.Close()
	}()

	listen, _ := relay.ParseAddr("tcp://127.0.0.1:0")
	target, _ := relay.ParseAddr("tcp://" + backend.Addr().String())
	srv, err := relay.New(relay.Config{Routes: []relay.Route{{
		Name: "web", Listen: listen, Target: target, IdleTimeout: time.Minute,
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := srv.Start(); err != nil {
		fmt.Println(err)
		return
	}
	c, _ := net.Dial("tcp", srv.Addrs("web")[0].String())
	b, _ := io.ReadAll(c)
	c.Close()
	fmt.Println(string(b))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	// Output: hello from the backend
}

func ExampleParseAddr() {
	for _, s := range []string{"tcp://[::1]:8080", "unix:///run/app.sock", "tcp://:8080"} {
		a, err := relay.ParseAddr(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(a.Network, a.Address)
	}
	// Output:
	// tcp [::1]:8080
	// unix /run/app.sock
	// error: address "tcp://:8080" has no host: write tcp://127.0.0.1:8080 for this machine only, or, to listen on every network, tcp://0.0.0.0:8080
}
