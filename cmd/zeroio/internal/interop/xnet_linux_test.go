package interop

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

const (
	runLen  = 8    // datagrams in one GSO run
	runSize = 1000 // bytes in each
)

// sendRun sends runLen datagrams of runSize bytes, the first byte of each
// first+i, as one UDP_SEGMENT send: a receiver with UDP_GRO on gets them
// from loopback as one buffer.
func sendRun(t *testing.T, tx *net.UDPConn, dst netip.AddrPort, first byte) {
	t.Helper()
	b := make([]byte, runLen*runSize)
	for i := range runLen {
		b[i*runSize] = first + byte(i)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], runSize)
	if _, _, err := tx.WriteMsgUDPAddrPort(b, oob, dst); err != nil {
		t.Fatal(err)
	}
}

func kernelHas(level, opt int, set bool) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if set {
		return unix.SetsockoptInt(fd, level, opt, 1) == nil
	}
	_, err = unix.GetsockoptInt(fd, level, opt)
	return err == nil
}

// TestXNetReadBatchGetsOneDatagramPerMessage reads a default *udp.Conn
// with x/net's ipv4 and ipv6 PacketConn.ReadBatch, as quic-go does, while
// a sender coalesces with GSO: each message is one datagram. The second
// time the Conn's own reads have turned GRO on first, and a run is
// coalesced and partly read when x/net takes the socket: the rest of it
// comes from the Conn's reads, one datagram each, and x/net gets what was
// sent after.
func TestXNetReadBatchGetsOneDatagramPerMessage(t *testing.T) {
	if !kernelHas(unix.SOL_UDP, unix.UDP_SEGMENT, false) || !kernelHas(unix.SOL_UDP, unix.UDP_GRO, true) {
		t.Skip("kernel without UDP GSO or GRO")
	}
	type batchReader interface {
		ReadBatch([]ipv4.Message, int) (int, error)
	}
	for _, fam := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		for _, readFirst := range []bool{false, true} {
			name := fam.network + "/xnet-only"
			if readFirst {
				name = fam.network + "/conn-read-first"
			}
			t.Run(name, func(t *testing.T) {
				probe, err := net.ListenPacket(fam.network, net.JoinHostPort(fam.addr, "0"))
				if err != nil {
					t.Skipf("no %s socket here: %v", fam.network, err)
				}
				probe.Close()
				rx, err := udp.Listen(fam.network, net.JoinHostPort(fam.addr, "0"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer rx.Close()
				tx, err := net.ListenUDP(fam.network, &net.UDPAddr{IP: net.ParseIP(fam.addr)})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Close()
				rx.SetReadDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 2048)
				next := byte(0)
				if readFirst {
					sendRun(t, tx, rx.AddrPort(), 0) // before the first read, GRO off: eight datagrams
					if n, _, err := rx.ReadFrom(buf); err != nil || n != runSize || buf[0] != 0 {
						t.Fatalf("first ReadFrom = %d [%d], %v", n, buf[0], err)
					}
					sendRun(t, tx, rx.AddrPort(), runLen) // GRO on: one buffer
					for i := 1; i < runLen+1; i++ {
						if n, _, err := rx.ReadFrom(buf); err != nil || n != runSize || buf[0] != byte(i) {
							t.Fatalf("ReadFrom %d = %d [%d], %v", i, n, buf[0], err)
						}
					}
					if st := rx.Stats(); !st.GRO || st.GROReads == 0 {
						t.Fatalf("the second run did not arrive coalesced: %+v", st)
					}
					next = runLen + 1 // the rest of the second run is pending in rx
				}
				var br batchReader
				if fam.network == "udp4" {
					br = ipv4.NewPacketConn(rx)
				} else {
					br = ipv6.NewPacketConn(rx)
				}
				if rx.Stats().GRO {
					t.Fatal("GRO on after x/net took the socket")
				}
				if readFirst {
					for ; next < 2*runLen; next++ {
						if n, _, err := rx.ReadFrom(buf); err != nil || n != runSize || buf[0] != next {
							t.Fatalf("pending datagram %d: ReadFrom = %d [%d], %v", next, n, buf[0], err)
						}
					}
				}
				for round := range 2 {
					first := next + byte(round*runLen)
					sendRun(t, tx, rx.AddrPort(), first)
					ms := make([]ipv4.Message, runLen)
					for i := range ms {
						ms[i].Buffers = [][]byte{make([]byte, 65536)}
					}
					for got := 0; got < runLen; {
						n, err := br.ReadBatch(ms[got:], 0)
						if err != nil {
							t.Fatal(err)
						}
						for i := got; i < got+n; i++ {
							if ms[i].N != runSize || ms[i].Buffers[0][0] != first+byte(i) {
								t.Fatalf("round %d, message %d: %d bytes [%d], want %d bytes [%d]", round, i, ms[i].N, ms[i].Buffers[0][0], runSize, first+byte(i))
							}
						}
						got += n
					}
				}
			})
		}
	}
}
