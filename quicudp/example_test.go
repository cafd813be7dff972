package quicudp_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/quic-go/quic-go"
	"github.com/zeroio/zeroio/quicudp"
	"github.com/zeroio/zeroio/udp"
)

// A quic-go server on a zeroio socket, reading with GRO, whose connection
// IDs carry server ID 0x07 for a load balancer in front to route by (a
// zeroio relay UDP route whose QUIC-LB configuration gives this target
// ID 07, for one).
func Example() {
	c, err := udp.Listen("udp", "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	gen, err := quicudp.NewCIDGenerator(quicudp.LBConfig{ServerID: []byte{0x07}, NonceLen: 8})
	if err != nil {
		log.Fatal(err)
	}
	tr := &quic.Transport{Conn: quicudp.New(c), ConnectionIDGenerator: gen}
	defer tr.Close()
	srvTLS, cliTLS, err := selfSigned() // a certificate for "localhost"
	if err != nil {
		log.Fatal(err)
	}
	ln, err := tr.Listen(srvTLS, nil)
	if err != nil {
		log.Fatal(err)
	}
	go func() { // the server: echo each stream
		for {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			str, err := conn.AcceptStream(context.Background())
			if err != nil {
				return
			}
			io.Copy(str, str)
			str.Close()
		}
	}()

	// A client, here on a plain *net.UDPConn.
	conn, err := quic.DialAddr(context.Background(), c.LocalAddr().String(), cliTLS, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	str, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	str.Write([]byte("hello"))
	str.Close()
	reply, err := io.ReadAll(str)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", reply)

	// What a load balancer reads from an ID the server issues.
	id, err := gen.GenerateConnectionID()
	if err != nil {
		log.Fatal(err)
	}
	sid, err := quicudp.ServerID(id.Bytes(), 0, 1, 8)
	fmt.Printf("server ID %x, %v\n", sid, err)
	// Output:
	// hello
	// server ID 07, <nil>
}
