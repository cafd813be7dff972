package udp

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestSplitGRO(t *testing.T) {
	data := make([]byte, 250)
	for i := range data {
		data[i] = byte(i)
	}
	meta := &Message{Addr: apA, Local: netip.MustParseAddr("127.0.0.2"), TOS: 2}
	msgs := make([]Message, 2)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 100)
	}
	f, used := splitGRO(msgs, data, 100, meta)
	if f != 2 || used != 200 {
		t.Fatalf("filled %d used %d, want 2 and 200 (the rest waits)", f, used)
	}
	f, used = splitGRO(msgs, data[used:], 100, meta)
	if f != 1 || used != 50 || msgs[0].N != 50 || !bytes.Equal(msgs[0].Payload(), data[200:]) {
		t.Fatalf("filled %d used %d N %d", f, used, msgs[0].N)
	}
	if msgs[0].Addr != apA || msgs[0].Local != meta.Local || msgs[0].TOS != 2 {
		t.Fatalf("metadata lost: %+v", msgs[0])
	}

	small := []Message{{Buf: make([]byte, 10)}, {Buf: make([]byte, 10)}}
	f, used = splitGRO(small, data[:40], 20, meta)
	if f != 2 || used != 40 || !small[0].Truncated || !small[1].Truncated || small[0].N != 10 {
		t.Fatalf("truncation not reported: %d %d %+v", f, used, small)
	}

	empty := []Message{{Buf: make([]byte, 10)}}
	if f, used = splitGRO(empty, nil, 0, meta); f != 1 || used != 0 || empty[0].N != 0 {
		t.Fatalf("empty datagram: filled %d used %d", f, used)
	}
}

// FuzzSplitGRO splits data as the kernel's GRO would have coalesced it and
// checks that, draining through message slices of varying sizes, every
// datagram comes out once, in order, whole unless its buffer was short.
func FuzzSplitGRO(f *testing.F) {
	f.Add(make([]byte, 1000), uint16(100), uint8(3), uint8(100))
	f.Add(make([]byte, 1001), uint16(100), uint8(1), uint8(50))
	f.Add(make([]byte, 5), uint16(0), uint8(2), uint8(1))
	f.Add([]byte{}, uint16(7), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, seg uint16, batch, bufLen uint8) {
		if batch == 0 {
			batch = 1
		}
		for i := range data {
			data[i] = byte(i * 7)
		}
		s := int(seg)
		want := s
		if s <= 0 || s > len(data) {
			want = len(data)
		}
		var got []byte
		consumed, datagrams := 0, 0
		for consumed < len(data) || (len(data) == 0 && datagrams == 0) {
			msgs := make([]Message, batch)
			for i := range msgs {
				msgs[i].Buf = make([]byte, bufLen)
			}
			f, used := splitGRO(msgs, data[consumed:], s, &Message{Addr: apA})
			if f == 0 || f > len(msgs) {
				t.Fatalf("filled %d of %d", f, len(msgs))
			}
			for i := range msgs[:f] {
				m := &msgs[i]
				size := min(want, len(data)-consumed-sumN(msgs[:i], want, len(data)-consumed))
				if m.Truncated != (size > len(m.Buf)) || m.N != min(size, len(m.Buf)) || m.Addr != apA {
					t.Fatalf("message %d: N=%d truncated=%v, datagram %d bytes, buf %d", i, m.N, m.Truncated, size, len(m.Buf))
				}
				got = append(got, m.Payload()...)
				datagrams++
			}
			consumed += used
			if len(data) == 0 {
				break
			}
		}
		if consumed != len(data) {
			t.Fatalf("consumed %d of %d", consumed, len(data))
		}
		if int(bufLen) >= want {
			if !bytes.Equal(got, data) {
				t.Fatal("payloads differ")
			}
		}
	})
}

// sumN is how many bytes of the remaining data the first len(ms) datagrams
// of size seg took.
func sumN(ms []Message, seg, rest int) int { return min(len(ms)*seg, rest) }
