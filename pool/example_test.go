package pool_test

import (
	"fmt"

	"github.com/zeroio/zeroio/pool"
)

func Example() {
	buf := pool.Get(1500) // len 1500, cap 2048
	defer pool.Put(buf)
	n := copy(buf, "datagram payload")
	fmt.Println(n, len(buf), cap(buf))
	// Output: 16 1500 2048
}

func ExampleSlab() {
	slab, err := pool.NewSlab(pool.SlabOptions{SlotSize: 2048, Slots: 1024})
	if err != nil {
		panic(err)
	}
	b := slab.Get()
	fmt.Println(len(b), slab.Put(b))
	fmt.Println(slab.Put(b)) // a second Put is refused, not corrupting
	// Output:
	// 2048 <nil>
	// pool: buffer returned twice
}

// A slab whose Ps keep their last returned slot: a Get/Put pair on one P
// is then one compare-and-swap, and the checks are the same.
func ExampleSlab_perPCache() {
	slab, err := pool.NewSlab(pool.SlabOptions{SlotSize: 2048, Slots: 1024, PerPCache: true})
	if err != nil {
		panic(err)
	}
	b := slab.Get()
	fmt.Println(slab.Put(b), slab.Put(b))
	fmt.Println(slab.Stats().Outstanding)
	// Output:
	// <nil> pool: buffer returned twice
	// 0
}

func ExampleArena() {
	arena, err := pool.NewArena(pool.ArenaOptions{ShardSize: 64 << 10, Retries: 2})
	if err != nil {
		panic(err)
	}
	b := arena.Make(12)
	copy(b.B, "small header")
	fmt.Println(string(b.B))
	c := b // handles are values
	fmt.Println(b.Done(), c.Done())
	// Output:
	// small header
	// <nil> pool: arena buffer released twice
}
