package quicudp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/net/ipv4"
)

// TestKeepBuffersUndoesAnExchange: when udp's ReadBatch has exchanged the
// Bufs of its messages, each datagram ends up in the buffer its message
// gave, which is what quic-go recycles with it.
func TestKeepBuffersUndoesAnExchange(t *testing.T) {
	ms := make([]ipv4.Message, 3)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 8)}
	}
	// The kernel filled buffer 2 with datagram 0, 0 with 1 and 1 with 2.
	copy(ms[2].Buffers[0], "zero")
	copy(ms[0].Buffers[0], "one")
	copy(ms[1].Buffers[0], "two")
	msgs := []udp.Message{
		{Buf: ms[2].Buffers[0], N: 4},
		{Buf: ms[0].Buffers[0], N: 3},
		{Buf: ms[1].Buffers[0], N: 3},
	}
	keepBuffers(ms, msgs)
	for i, want := range []string{"zero", "one", "two"} {
		if got := ms[i].Buffers[0][:msgs[i].N]; string(got) != want {
			t.Errorf("message %d holds %q, want %q", i, got, want)
		}
		if !sameBuf(msgs[i].Buf, ms[i].Buffers[0]) {
			t.Errorf("message %d: Buf is not its own buffer", i)
		}
	}
}

// TestReadBatchFillsXNetMessages reads through Conn as quic-go does: each
// message gets one datagram, its size, its source and its control bytes.
func TestReadBatchFillsXNetMessages(t *testing.T) {
	c, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	qc := New(c)
	defer qc.Close()
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for i := range 3 {
		if _, err := tx.WriteToUDPAddrPort(bytes.Repeat([]byte{byte(i)}, 100+i), c.AddrPort()); err != nil {
			t.Fatal(err)
		}
	}
	qc.SetReadDeadline(time.Now().Add(10 * time.Second))
	ms := make([]ipv4.Message, 3)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1500)}
		ms[i].OOB = make([]byte, 128)
	}
	for got := 0; got < 3; {
		n, err := qc.ReadBatch(ms[got:], 0)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	for i := range ms {
		m := &ms[i]
		if m.N != 100+i || m.Buffers[0][0] != byte(i) || m.Addr.String() != tx.LocalAddr().String() {
			t.Errorf("message %d: %d bytes [%d] from %v", i, m.N, m.Buffers[0][0], m.Addr)
		}
	}
	// quic-go sets socket options through SyscallConn's Control: GRO,
	// which the reads turned on where the kernel has it, stays on.
	gro := c.Stats().GRO
	rc, err := qc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(uintptr) {}); err != nil {
		t.Fatal(err)
	}
	if c.Stats().GRO != gro {
		t.Errorf("Control changed GRO: %+v", c.Stats())
	}
}
