package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// Every way of reading a Conn gets one datagram per read, sent as one GSO
// run (which the kernel delivers to a socket with UDP_GRO on as one
// buffer): the Conn's own methods split it, and a socket handed out
// through SyscallConn or File has GRO off, so the kernel splits it.

const (
	runLen  = 8    // datagrams in one GSO run
	runSize = 1000 // bytes in each
)

// gsoSender is a socket of package net's, so that the runs it sends are
// exactly what its WriteMsgUDP is given: one UDP_SEGMENT send each.
func gsoSender(t *testing.T) *net.UDPConn {
	t.Helper()
	if !kernelGSO() {
		t.Skip("kernel without UDP GSO (UDP_SEGMENT)")
	}
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	return tx
}

// sendRun sends runLen datagrams of runSize bytes, the first byte of each
// first+i, as one UDP_SEGMENT send to dst.
func sendRun(t *testing.T, tx *net.UDPConn, dst netip.AddrPort, first byte) {
	t.Helper()
	b := make([]byte, runLen*runSize)
	for i := range runLen {
		b[i*runSize] = first + byte(i)
	}
	oob := udpsys.AppendUDPSegment(nil, runSize)
	if _, _, err := tx.WriteMsgUDPAddrPort(b, oob, dst); err != nil {
		t.Fatal(err)
	}
}

// waitReadable waits until c's socket holds a datagram, without reading
// it: the run just sent is queued as one buffer or several.
func waitReadable(t *testing.T, c *Conn) {
	t.Helper()
	var n int
	var err error
	if cerr := c.Control(func(fd uintptr) {
		n, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5000)
	}); cerr != nil {
		t.Fatal(cerr)
	}
	if n != 1 || err != nil {
		t.Fatalf("socket not readable: %d, %v", n, err)
	}
}

// checkRun reads runLen datagrams with read and checks each is one whole
// datagram of the run, in order.
func checkRun(t *testing.T, first byte, read func(buf []byte) (int, error)) {
	t.Helper()
	buf := make([]byte, 65536)
	for i := range runLen {
		n, err := read(buf)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if n != runSize || buf[0] != first+byte(i) {
			t.Fatalf("read %d: %d bytes [%d], want %d bytes [%d]", i, n, buf[0], runSize, first+byte(i))
		}
	}
}

// listenRx opens a default Conn on 127.0.0.1 and makes its first read, so
// that GRO is on.
func listenRx(t *testing.T) *Conn {
	t.Helper()
	if !kernelGRO() {
		t.Skip("kernel without UDP GRO (UDP_GRO)")
	}
	rx, err := Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	return rx
}

func TestOwnReadMethodsSplitGSORuns(t *testing.T) {
	for _, m := range []struct {
		name string
		read func(c *Conn, buf []byte) (int, error)
	}{
		{"ReadFrom", func(c *Conn, buf []byte) (int, error) {
			var pc net.PacketConn = c
			n, _, err := pc.ReadFrom(buf)
			return n, err
		}},
		{"ReadMsgUDP", func(c *Conn, buf []byte) (int, error) {
			n, _, _, _, err := c.ReadMsgUDP(buf, make([]byte, 128))
			return n, err
		}},
		{"ReadBatch", func(c *Conn, buf []byte) (int, error) {
			msgs := []Message{{Buf: buf}}
			_, err := c.ReadBatch(msgs)
			return msgs[0].N, err
		}},
	} {
		t.Run(m.name, func(t *testing.T) {
			tx := gsoSender(t)
			rx := listenRx(t)
			firstRead(t, rx)
			rx.SetReadDeadline(time.Now().Add(10 * time.Second))
			for round := range byte(3) {
				sendRun(t, tx, rx.AddrPort(), round*runLen)
				checkRun(t, round*runLen, func(buf []byte) (int, error) { return m.read(rx, buf) })
			}
			if st := rx.Stats(); !st.GRO || st.GROReads == 0 {
				t.Fatalf("the runs did not arrive coalesced, so nothing was split: %+v", st)
			}
		})
	}
}

// TestConnectedReadSplitsGSORuns: a Conn made from a connected socket, read
// as a net.Conn.
func TestConnectedReadSplitsGSORuns(t *testing.T) {
	tx := gsoSender(t)
	if !kernelGRO() {
		t.Skip("kernel without UDP GRO (UDP_GRO)")
	}
	uc, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, tx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	rx, err := NewConn(uc, nil)
	if err != nil {
		uc.Close()
		t.Fatal(err)
	}
	defer rx.Close()
	firstRead(t, rx)
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	var nc net.Conn = rx
	for round := range byte(2) {
		sendRun(t, tx, rx.AddrPort(), round*runLen)
		checkRun(t, round*runLen, nc.Read)
	}
	if st := rx.Stats(); st.GROReads == 0 {
		t.Fatalf("the runs did not arrive coalesced: %+v", st)
	}
}

// rawRecvmsg reads one datagram from rc with recvmsg(2), as a user of
// SyscallConn would.
func rawRecvmsg(rc syscall.RawConn, buf []byte) (int, error) {
	var n int
	var err error
	if rerr := rc.Read(func(fd uintptr) bool {
		n, _, _, _, err = unix.Recvmsg(int(fd), buf, make([]byte, 128), 0)
		return err != unix.EAGAIN
	}); rerr != nil {
		return 0, rerr
	}
	return n, err
}

// rawRecvmmsg reads up to len(bufs) datagrams from rc with one
// recvmmsg(2) and returns their sizes.
func rawRecvmmsg(rc syscall.RawConn, bufs [][]byte) ([]int, error) {
	hs := make([]unix.Mmsghdr, len(bufs))
	iovs := make([]unix.Iovec, len(bufs))
	for i := range bufs {
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(len(bufs[i]))
		hs[i].Hdr.Iov = &iovs[i]
		hs[i].Hdr.Iovlen = 1
	}
	var n uintptr
	var errno unix.Errno
	if err := rc.Read(func(fd uintptr) bool {
		n, _, errno = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), 0, 0, 0)
		return errno != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if errno != 0 {
		return nil, errno
	}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = int(hs[i].Len)
	}
	return sizes, nil
}

// TestHandedOutSocketGetsOneDatagramPerRead reads through SyscallConn with
// recvmsg and recvmmsg, and through File: each read gets one datagram,
// because handing the socket out turned GRO off; first with the socket
// handed out before any read of the Conn (GRO was never on), then after
// the Conn's own reads had turned it on.
func TestHandedOutSocketGetsOneDatagramPerRead(t *testing.T) {
	for _, readFirst := range []bool{false, true} {
		for _, how := range []string{"SyscallConn+recvmsg", "SyscallConn+recvmmsg", "File+recvmsg"} {
			t.Run(fmt.Sprintf("%s/conn-read-first=%v", how, readFirst), func(t *testing.T) {
				tx := gsoSender(t)
				rx := listenRx(t)
				if readFirst {
					firstRead(t, rx)
					if !rx.Stats().GRO {
						t.Fatal("GRO off after the first read")
					}
				}
				var rc syscall.RawConn
				var err error
				if how == "File+recvmsg" {
					var f *os.File
					f, err = rx.File()
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					rc, err = f.SyscallConn()
				} else {
					rc, err = rx.SyscallConn()
				}
				if err != nil {
					t.Fatal(err)
				}
				if st := rx.Stats(); st.GRO {
					t.Fatalf("GRO still on after the hand-out: %+v", st)
				}
				for round := range byte(2) {
					sendRun(t, tx, rx.AddrPort(), round*runLen)
					if how == "SyscallConn+recvmmsg" {
						bufs := make([][]byte, runLen)
						for i := range bufs {
							bufs[i] = make([]byte, 65536)
						}
						for got := 0; got < runLen; {
							sizes, err := rawRecvmmsg(rc, bufs[got:])
							if err != nil {
								t.Fatal(err)
							}
							for j, n := range sizes {
								if i := got + j; n != runSize || bufs[i][0] != round*runLen+byte(i) {
									t.Fatalf("datagram %d: %d bytes [%d]", i, n, bufs[i][0])
								}
							}
							got += len(sizes)
						}
						continue
					}
					checkRun(t, round*runLen, func(buf []byte) (int, error) { return rawRecvmsg(rc, buf) })
				}
			})
		}
	}
}

// TestHandOutSplitsWhatGROAlreadyCoalesced hands the socket out while runs
// the kernel coalesced under GRO wait in it, one partly read by the Conn:
// the Conn's own reads return them one datagram each, first; the raw
// reader gets only what was sent after the hand-out, one datagram per read.
func TestHandOutSplitsWhatGROAlreadyCoalesced(t *testing.T) {
	tx := gsoSender(t)
	rx := listenRx(t)
	firstRead(t, rx)
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	sendRun(t, tx, rx.AddrPort(), 0)
	buf := make([]byte, 2048)
	if n, _, err := rx.ReadFrom(buf); err != nil || n != runSize || buf[0] != 0 {
		t.Fatalf("ReadFrom = %d [%d], %v", n, buf[0], err)
	}
	sendRun(t, tx, rx.AddrPort(), runLen)
	waitReadable(t, rx) // the second run is queued, coalesced
	rc, err := rx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if st := rx.Stats(); st.GRO || st.GROReads == 0 {
		t.Fatalf("want GRO off now, after coalesced reads: %+v", st)
	}
	for i := 1; i < 2*runLen; i++ {
		n, _, err := rx.ReadFrom(buf)
		if err != nil || n != runSize || buf[0] != byte(i) {
			t.Fatalf("datagram %d: ReadFrom = %d [%d], %v", i, n, buf[0], err)
		}
	}
	if st := rx.Stats(); st.GROReads != 2 {
		t.Fatalf("the second run was not split from one coalesced buffer: %+v", st)
	}
	sendRun(t, tx, rx.AddrPort(), 2*runLen)
	checkRun(t, 2*runLen, func(b []byte) (int, error) { return rawRecvmsg(rc, b) })
	// After the raw reads, the Conn's reads are plain.
	sendRun(t, tx, rx.AddrPort(), 3*runLen)
	checkRun(t, 3*runLen, func(b []byte) (int, error) { n, _, err := rx.ReadFrom(b); return n, err })
}

// TestHandOutWakesABlockedRead hands the socket out while a read of the
// Conn waits for a datagram, holding the read lock the hand-out needs: the
// hand-out wakes it, switches GRO off, and the read goes on waiting, under
// its own deadline again, and returns the next datagram, with no error.
func TestHandOutWakesABlockedRead(t *testing.T) {
	tx := gsoSender(t)
	rx := listenRx(t)
	firstRead(t, rx)
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	done := make(chan error, 1)
	buf := make([]byte, 2048)
	go func() {
		_, _, err := rx.ReadFrom(buf)
		done <- err
	}()
	// Wait until the reader holds the read lock (it is then waiting in
	// the netpoller, or about to).
	for rx.readMu.TryLock() {
		rx.readMu.Unlock()
		time.Sleep(time.Millisecond)
	}
	if _, err := rx.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	if rx.Stats().GRO {
		t.Fatal("GRO on after the hand-out")
	}
	sendRun(t, tx, rx.AddrPort(), 0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if buf[0] != 0 {
		t.Fatalf("first datagram [%d]", buf[0])
	}
	for i := 1; i < runLen; i++ {
		n, _, err := rx.ReadFrom(buf)
		if err != nil || n != runSize || buf[0] != byte(i) {
			t.Fatalf("datagram %d: ReadFrom = %d [%d], %v", i, n, buf[0], err)
		}
	}
}

// TestWritesSendWhatTheyAreGiven: after the Conn's own GSO sends, WriteTo
// sends a 3,000-byte datagram as one datagram, and WriteMsgUDP with the
// caller's UDP_SEGMENT message sends exactly the segments it asks for.
func TestWritesSendWhatTheyAreGiven(t *testing.T) {
	if !kernelGSO() {
		t.Skip("kernel without UDP GSO (UDP_SEGMENT)")
	}
	tx, err := Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	needGSO(t, tx)
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	dst := rx.LocalAddr().(*net.UDPAddr)
	expect := func(what string, sizes ...int) {
		t.Helper()
		buf := make([]byte, 65536)
		for i, size := range sizes {
			n, err := rx.Read(buf)
			if err != nil || n != size || buf[0] != byte(i) {
				t.Fatalf("%s: datagram %d: %d bytes [%d], %v; want %d bytes [%d]", what, i, n, buf[0], err, size, i)
			}
		}
	}
	out := makeMsgs(4, 1000)
	for i := range out {
		out[i].Buf[0] = byte(i)
		out[i].Addr = dst.AddrPort()
	}
	if n, err := tx.WriteBatch(out); n != 4 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	expect("WriteBatch", 1000, 1000, 1000, 1000)
	if st := tx.Stats(); st.GSOSends != 1 {
		t.Fatalf("WriteBatch did not coalesce: %+v", st)
	}
	big := make([]byte, 3000)
	if _, err := tx.WriteTo(big, dst); err != nil {
		t.Fatal(err)
	}
	expect("WriteTo", 3000)
	for i := range 3 {
		big[i*1000] = byte(i)
	}
	if _, _, err := tx.WriteMsgUDP(big, udpsys.AppendUDPSegment(nil, 1000), dst); err != nil {
		t.Fatal(err)
	}
	expect("WriteMsgUDP with UDP_SEGMENT", 1000, 1000, 1000)
	big[0] = 0
	if _, _, err := tx.WriteMsgUDPAddrPort(big, nil, dst.AddrPort()); err != nil {
		t.Fatal(err)
	}
	expect("WriteMsgUDPAddrPort", 3000)
}

// TestReadQueuedNeverWaits: ReadQueued returns 0 at once on an empty
// socket, and otherwise what the socket holds and what an earlier read
// left pending (here, the rest of a coalesced run read two at a time).
func TestReadQueuedNeverWaits(t *testing.T) {
	tx := gsoSender(t)
	rx := listenRx(t)
	firstRead(t, rx)
	msgs := makeMsgs(2, 2048)
	if n, err := rx.ReadQueued(msgs); n != 0 || err != nil {
		t.Fatalf("empty socket: ReadQueued = %d, %v", n, err)
	}
	sendRun(t, tx, rx.AddrPort(), 0)
	waitReadable(t, rx)
	got := 0
	for {
		n, err := rx.ReadQueued(msgs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		for i := range msgs[:n] {
			if msgs[i].N != runSize || msgs[i].Buf[0] != byte(got) {
				t.Fatalf("datagram %d: %d bytes [%d]", got, msgs[i].N, msgs[i].Buf[0])
			}
			got++
		}
	}
	if got != runLen {
		t.Fatalf("ReadQueued got %d datagrams, want %d", got, runLen)
	}
	if st := rx.Stats(); st.GROReads != 1 {
		t.Fatalf("the run was not read as one coalesced buffer: %+v", st)
	}
}
