package pool

import (
	"errors"
	"testing"
	"unsafe"
)

// overlaps reports whether two buffers share any byte of memory.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(cap(b)) && pb < pa+uintptr(cap(a))
}

// FuzzSlab drives a slab with random Get, TryGet, Put, double Put, foreign
// and resliced Puts, and checks that owners never share memory, that each
// misuse is refused with the right error and that the counters agree.
func FuzzSlab(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 2, 2, 2, 1, 1, 1, 3, 3})
	f.Add([]byte{6, 6, 6, 6, 6, 6, 6, 6, 6, 0, 7, 1, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const slots, size = 8, 24
		perP := len(ops)%2 == 1 // with per-P caches or not
		s := mustSlab(t, size, slots, perP)
		var held, released [][]byte
		for k, op := range ops {
			switch op % 8 {
			case 0, 6: // Get (falls back to the heap when full)
				b := s.Get()
				for _, h := range held {
					if overlaps(b, h) {
						t.Fatalf("op %d: Get returned memory another owner holds", k)
					}
				}
				held = append(held, b)
			case 7: // TryGet
				b, err := s.TryGet()
				if err != nil {
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("op %d: %v", k, err)
					}
					continue
				}
				held = append(held, b)
			case 1: // Put one we hold
				if len(held) == 0 {
					continue
				}
				i := k % len(held)
				b := held[i]
				held = append(held[:i], held[i+1:]...)
				if err := s.Put(b[:k%(size+1)]); err != nil {
					t.Fatalf("op %d: Put of an owned buffer: %v", k, err)
				}
				released = append(released, b)
			case 2: // double Put of one released and not handed out again
				if len(released) == 0 {
					continue
				}
				b := released[k%len(released)]
				reissued := false
				for _, h := range held {
					if overlaps(b, h) {
						reissued = true
					}
				}
				inSlab := uintptr(unsafe.Pointer(&b[:1][0]))-s.base < uintptr(len(s.mem))
				if reissued || !inSlab {
					continue // a late Put: the caller's bug no pool can see
				}
				if err := s.Put(b); !errors.Is(err, ErrDoublePut) {
					t.Fatalf("op %d: double Put: %v", k, err)
				}
			case 3: // foreign
				if err := s.Put(make([]byte, size+1)); !errors.Is(err, ErrForeign) {
					t.Fatalf("op %d: foreign Put: %v", k, err)
				}
			case 4: // resliced from the middle of one we hold
				if len(held) == 0 {
					continue
				}
				b := held[k%len(held)]
				if uintptr(unsafe.Pointer(&b[:1][0]))-s.base >= uintptr(len(s.mem)) {
					continue
				}
				if err := s.Put(b[1+k%(size-1):]); !errors.Is(err, ErrForeign) {
					t.Fatalf("op %d: resliced Put: %v", k, err)
				}
			case 5: // Put nil
				if err := s.Put(nil); !errors.Is(err, ErrForeign) {
					t.Fatalf("op %d: nil Put: %v", k, err)
				}
			}
		}
		if st := s.Stats(); st.Outstanding != int64(len(held)) {
			t.Fatalf("Outstanding %d, holding %d", st.Outstanding, len(held))
		}
		if st := s.Stats(); st.BytesHeld != slabHeld(size, slots, perP) {
			t.Fatalf("BytesHeld %d", st.BytesHeld)
		}
	})
}

// FuzzArena drives an arena with random Make, Done, Done through copies
// and stale handles, and checks that live buffers never overlap and keep
// their contents, and that every second release is refused.
func FuzzArena(f *testing.F) {
	f.Add([]byte{10, 20, 1, 30, 2, 40, 3})
	f.Add([]byte{200, 200, 200, 1, 1, 1, 2, 2, 2, 0, 0, 0})
	f.Add([]byte{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 3, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		// A one-word bitmap, or four words with buffers across them.
		a := mustArena(t, []int{128, 1024}[len(ops)%2], 2)
		type live struct {
			b     Buf
			owner int
		}
		var held []live
		var released []Buf
		for k, op := range ops {
			switch {
			case op >= 4: // Make(op/2): some above half a shard go to the heap
				b := a.Make(int(op / 2))
				for _, h := range held {
					if overlaps(b.B, h.b.B) {
						t.Fatalf("op %d: Make returned memory another owner holds", k)
					}
				}
				fill(b.B, k, 0)
				held = append(held, live{b, k})
			case op == 1 && len(held) > 0: // Done, keeping a copy
				i := k % len(held)
				h := held[i]
				held = append(held[:i], held[i+1:]...)
				if !intact(h.b.B, h.owner, 0) {
					t.Fatalf("op %d: a live buffer was overwritten", k)
				}
				c := h.b
				if err := h.b.Done(); err != nil {
					t.Fatalf("op %d: Done: %v", k, err)
				}
				released = append(released, c)
			case op == 2 && len(released) > 0: // Done through a copy
				c := released[k%len(released)]
				fromHeap := c.s == nil
				if err := c.Done(); !fromHeap && !errors.Is(err, ErrDoubleDone) {
					t.Fatalf("op %d: Done through a copy: %v", k, err)
				}
			case op == 3: // a Done on the zero handle
				var z Buf
				if err := z.Done(); err != nil {
					t.Fatalf("op %d: %v", k, err)
				}
			}
		}
		for _, h := range held {
			if !intact(h.b.B, h.owner, 0) {
				t.Fatal("a live buffer was overwritten")
			}
		}
	})
}
