package udp_test

import (
	"fmt"
	"log"

	"github.com/zeroio/zeroio/udp"
)

// Two sockets on loopback exchange a batch of datagrams. Equal-sized
// datagrams to one destination go out as one GSO send where the kernel
// supports it.
func ExampleConn_WriteBatch() {
	srv, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	dst := srv.AddrPort()
	out := make([]udp.Message, 3)
	for i := range out {
		out[i] = udp.Message{Buf: []byte(fmt.Sprintf("datagram %d", i)), Addr: dst}
	}
	if _, err := cli.WriteAll(out); err != nil {
		log.Fatal(err)
	}

	in := make([]udp.Message, 8)
	for i := range in {
		in[i].Buf = make([]byte, 1500)
	}
	for got := 0; got < len(out); {
		n, err := srv.ReadBatch(in[got:])
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range in[got : got+n] {
			fmt.Printf("%s from cli: %v\n", m.Payload(), m.Addr == cli.AddrPort())
		}
		got += n
	}
	// Output:
	// datagram 0 from cli: true
	// datagram 1 from cli: true
	// datagram 2 from cli: true
}

// A server bound to a wildcard address learns which local address each
// datagram was sent to and replies from it.
func ExampleOptions_packetInfo() {
	srv, err := udp.Listen("udp4", "0.0.0.0:0", &udp.Options{PacketInfo: true})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// Sending to 0.0.0.0 reaches this host (127.0.0.1 on Linux).
	target := srv.AddrPort()
	_, err = cli.WriteBatch([]udp.Message{{Buf: []byte("ping"), Addr: target}})
	if err != nil {
		log.Fatal(err)
	}
	in := []udp.Message{{Buf: make([]byte, 1500)}}
	if _, err := srv.ReadBatch(in); err != nil {
		log.Fatal(err)
	}
	reply := []udp.Message{{Buf: []byte("pong"), Addr: in[0].Addr, Local: in[0].Local}}
	if _, err := srv.WriteBatch(reply); err != nil {
		log.Fatal(err)
	}
	if _, err := cli.ReadBatch(in); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s from the address the client sent to: %v\n", in[0].Payload(), in[0].Addr.Port() == target.Port())
	// Output: pong from the address the client sent to: true
}

// An echo server: a Message as ReadBatch fills it is already the reply,
// Addr the client and (with PacketInfo) Local the address it reached.
func ExampleConn_ReadBatch() {
	srv, err := udp.Listen("udp4", "127.0.0.1:0", &udp.Options{PacketInfo: true})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	for _, s := range []string{"a", "bb", "ccc"} {
		if _, err := cli.WriteBatch([]udp.Message{{Buf: []byte(s), Addr: srv.AddrPort()}}); err != nil {
			log.Fatal(err)
		}
	}

	msgs := make([]udp.Message, 64)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 1500)
	}
	for echoed := 0; echoed < 3; {
		n, err := srv.ReadBatch(msgs) // many datagrams, one syscall, 0 allocs
		if err != nil {
			log.Fatal(err)
		}
		for i := range msgs[:n] {
			msgs[i].Buf = msgs[i].Buf[:msgs[i].N]
		}
		if _, err := srv.WriteAll(msgs[:n]); err != nil {
			log.Fatal(err)
		}
		for i := range msgs {
			msgs[i].Buf = msgs[i].Buf[:cap(msgs[i].Buf)]
		}
		echoed += n
	}

	in := []udp.Message{{Buf: make([]byte, 16)}}
	for range 3 {
		if _, err := cli.ReadBatch(in); err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(in[0].Payload()), in[0].Addr == srv.AddrPort())
	}
	// Output:
	// a true
	// bb true
	// ccc true
}
