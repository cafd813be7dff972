package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bytedance/gopkg/lang/mcache"
	gbp "github.com/libp2p/go-buffer-pool"
	"github.com/valyala/bytebufferpool"

	"github.com/zeroio/zeroio/pool"
)

// A poolImpl gets a buffer of the benchmark's size and returns it.
type poolImpl struct {
	name string
	// setup returns the get/put pair for one size; ops are Get, write one
	// byte, Put.
	setup func(size int) (op func())
}

// sink keeps benchmarked allocations from being optimised away.
//
//lint:ignore U1000 written only, on purpose
var sink []byte

func poolImpls() []poolImpl {
	return []poolImpl{
		{"make", func(size int) func() {
			return func() {
				b := make([]byte, size)
				b[0] = 1
				sink = b
			}
		}},
		{"syncpool-slice", func(size int) func() {
			p := &sync.Pool{New: func() any { return make([]byte, size) }}
			return func() {
				b := p.Get().([]byte)
				b[0] = 1
				p.Put(b) //lint:ignore SA6002 the 24-byte allocation is what this peer measures
			}
		}},
		{"syncpool-ptr", func(size int) func() {
			p := &sync.Pool{New: func() any { b := make([]byte, size); return &b }}
			return func() {
				b := p.Get().(*[]byte)
				(*b)[0] = 1
				p.Put(b)
			}
		}},
		{"mcache", func(size int) func() {
			return func() {
				b := mcache.Malloc(size)
				b[0] = 1
				mcache.Free(b)
			}
		}},
		{"bytebufferpool", func(size int) func() {
			var p bytebufferpool.Pool
			return func() {
				bb := p.Get()
				if cap(bb.B) < size {
					bb.B = make([]byte, size)
				}
				bb.B = bb.B[:size]
				bb.B[0] = 1
				p.Put(bb)
			}
		}},
		{"gobufferpool", func(size int) func() {
			var p gbp.BufferPool
			return func() {
				b := p.Get(size)
				b[0] = 1
				p.Put(b)
			}
		}},
		{"zeroio-sized", func(size int) func() {
			p := pool.NewSized(pool.SizedOptions{})
			return func() {
				b := p.Get(size)
				b[0] = 1
				p.Put(b)
			}
		}},
		{"zeroio-slab", slabOp(false)},
		{"zeroio-slab-perp", slabOp(true)},
		{"zeroio-arena", func(size int) func() {
			a, err := pool.NewArena(pool.ArenaOptions{ShardSize: 1 << 20, Retries: 2})
			if err != nil {
				panic(err)
			}
			return func() {
				b := a.Make(size)
				b.B[0] = 1
				_ = b.Done()
			}
		}},
	}
}

var poolSizes = []int{64, 512, 4096, 16384, 65536}

func init() {
	register(Suite{Group: "pool", Name: "Pool", Cases: poolCases})
	register(Suite{Group: "pool", Name: "SeedBytePool", Cases: seedBytePoolCases})
	register(Suite{Group: "pool", Name: "VsMalloc", Cases: vsMallocCases})
	register(Suite{Group: "pool", Name: "Chaos", Cases: chaosCases, Metric: "allocs/op"})
}

// poolCases compares zeroio's pools with the standard library and the Go
// peers at each size, serially and on every P at once (parallel). One op
// is Get, write one byte, Put.
func poolCases(sc Scale) []Case {
	sizes := poolSizes
	if sc < Full {
		sizes = []int{64, 4096, 65536}
	}
	var cs []Case
	for _, mode := range []string{"serial", "par"} {
		for _, size := range sizes {
			for _, im := range poolImpls() {
				cs = append(cs, Case{fmt.Sprintf("mode=%s/size=%d/impl=%s", mode, size, im.name), func(b *testing.B) {
					op := im.setup(size)
					op()
					b.ReportAllocs()
					b.ResetTimer()
					if mode == "serial" {
						for range b.N {
							op()
						}
						return
					}
					parallel(b.N, op)
				}})
			}
		}
	}
	return cs
}

// parallel runs op n times on GOMAXPROCS goroutines, as b.RunParallel
// does, but with each goroutine counting in a local variable. RunParallel
// counts in a testing.PB per goroutine, a 32-byte heap object whose count
// pb.Next decrements on every op; when two goroutines' PBs land on one
// cache line, that line bounces between the CPUs on every op, and a
// benchmark of an op as short as a pool's Get/Put measures the bouncing
// (some samples several times slower than others, depending on where the
// PBs happened to be allocated). Counting in a local variable removes
// that. Goroutines take work in grains from one counter, as RunParallel
// does, so that none idles while another has a backlog.
//
// Peers whose every op writes one shared line (bytebufferpool's call
// counters) stay bimodal under either loop, and can be slower under this
// one: how often a contended line moves depends on how much else each op
// does, and this loop does less.
func parallel(n int, op func()) {
	procs := runtime.GOMAXPROCS(0)
	grain := int64(max(1, min(10_000, n/(100*procs))))
	var next atomic.Int64
	var ready atomic.Int32
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			// Start when every goroutine runs, so that each makes its
			// first op, and the objects a peer allocates per goroutine
			// (go-buffer-pool's bufp, bytebufferpool's ByteBuffer), on a
			// P of its own rather than next to another's on one P.
			ready.Add(1)
			for ready.Load() < int32(procs) {
				runtime.Gosched()
			}
			for {
				end := next.Add(grain)
				start := end - grain
				if start >= int64(n) {
					return
				}
				for range min(end, int64(n)) - start {
					op()
				}
			}
		})
	}
	wg.Wait()
}

// slabOp returns BenchmarkPool's op for a Slab of 256 slots, with or
// without per-P caches.
func slabOp(perP bool) func(size int) func() {
	return func(size int) func() {
		s, err := pool.NewSlab(pool.SlabOptions{SlotSize: size, Slots: 256, PerPCache: perP})
		if err != nil {
			panic(err)
		}
		return func() {
			b := s.Get()
			b[0] = 1
			_ = s.Put(b)
		}
	}
}

// BenchmarkSeedBytePool is the benchmark of a fixed-slot bytepool article
// ("通过 bytepool 避免 sync.Pool 的额外内存分配"):
// Get and Put a 10-byte buffer from a pool of 10, serially. The article's
// own BytePool spins forever when full and lets a double Put hand one slot
// to two owners; Slab does neither, with its bound and checks on.
func seedBytePoolCases(Scale) []Case {
	slab := func(perP bool) func(b *testing.B) {
		return func(b *testing.B) {
			s, err := pool.NewSlab(pool.SlabOptions{SlotSize: 10, Slots: 10, PerPCache: perP})
			if err != nil {
				fatal(b, err)
			}
			b.ReportAllocs()
			for range b.N {
				d := s.Get()
				_ = s.Put(d)
			}
		}
	}
	return []Case{{"impl=zeroio-slab", slab(false)}, {"impl=zeroio-slab-perp", slab(true)}, {"impl=syncpool-slice", func(b *testing.B) {
		p := &sync.Pool{New: func() any { return make([]byte, 10) }}
		b.ReportAllocs()
		for range b.N {
			d := p.Get().([]byte)
			p.Put(d) //lint:ignore SA6002 the allocation is what the article measured
		}
	}}, {"impl=mcache", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			d := mcache.Malloc(0, 10)
			mcache.Free(d)
		}
	}}}
}

// vsMallocCases are github.com/jsign/bufpool's BenchmarkVsMalloc for one
// serial client, with make (bufpool's "malloc") beside the pools in each case:
// overhead asks for more than half a shard (a plain allocation through the
// pool); reuse asks and returns serially.
func vsMallocCases(sc Scale) []Case {
	sizes := []int{4, 64, 512, 16384}
	if sc < Full {
		sizes = []int{64, 16384}
	}
	var cs []Case
	for _, sz := range sizes {
		run := func(name string, op func()) {
			cs = append(cs, Case{fmt.Sprintf("size=%d/case=%s", sz, name), func(b *testing.B) {
				op()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					op()
				}
			}})
		}
		run("overhead/impl=make", func() { sink = make([]byte, sz) })
		over, _ := pool.NewArena(pool.ArenaOptions{ShardSize: sz, Retries: 1})
		run("overhead/impl=zeroio-arena", func() { x := over.Make(sz); _ = x.Done() })
		bpOver := newBufpoolModel(sz/2, 1)
		run("overhead/impl=bufpool-model", func() { x := bpOver.Make(sz); x.Done() })
		run("reuse/impl=make", func() { sink = make([]byte, sz) })
		reuse, _ := pool.NewArena(pool.ArenaOptions{ShardSize: sz * 2, Retries: 1})
		run("reuse/impl=zeroio-arena", func() { x := reuse.Make(sz); _ = x.Done() })
		bpReuse := newBufpoolModel(sz*2, 1)
		run("reuse/impl=bufpool-model", func() { x := bpReuse.Make(sz); x.Done() })
		sized := pool.NewSized(pool.SizedOptions{})
		run("reuse/impl=zeroio-sized", func() { sized.Put(sized.Get(sz)) })
	}
	return cs
}

// chaosSize and chaosSleep are bufpool's non-uniform sizes (about 10 bytes)
// and lifetimes (about a microsecond), drawn from a PCG source held by
// value so that the harness itself allocates almost nothing.
func chaosSize(r *rand.Rand) int { return max(int(r.NormFloat64())+10, 0) }
func chaosSleep(r *rand.Rand) time.Duration {
	return time.Duration(max(int(r.NormFloat64()*.3+1), 0)) * time.Microsecond
}

// BenchmarkChaos is github.com/jsign/bufpool's concurrent benchmark: 100
// goroutines each make 1000 buffers of non-uniform size, hold each for a
// non-uniform time and release it, with 100-byte shards and 0..8 retries.
func chaosCases(sc Scale) []Case {
	const goroutines = 100
	rounds := 1000
	if sc == Quick {
		rounds = 100
	}
	// Each goroutine's generator is made once and reseeded per round, so
	// the harness adds about one allocation per goroutine (its closure),
	// the same for every impl.
	var pcgs [goroutines]rand.PCG
	var rs [goroutines]*rand.Rand
	for i := range rs {
		rs[i] = rand.New(&pcgs[i])
	}
	harness := func(b *testing.B, work func(r *rand.Rand)) {
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			var wg sync.WaitGroup
			for i := range goroutines {
				pcgs[i].Seed(uint64(i), 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					work(rs[i])
				}()
			}
			wg.Wait()
		}
	}
	var cs []Case
	for _, retries := range []int{0, 1, 2, 4, 8} {
		// The allocators live as long as the case, as they would in a
		// program: samples measure the steady state, not the first fill.
		a, err := pool.NewArena(pool.ArenaOptions{ShardSize: 100, Retries: retries})
		if err != nil {
			panic(err)
		}
		m := newBufpoolModel(100, retries)
		cs = append(cs, Case{fmt.Sprintf("retries=%d/impl=zeroio-arena", retries), func(b *testing.B) {
			harness(b, func(r *rand.Rand) {
				for range rounds {
					sz := chaosSize(r)
					buf := a.Make(sz)
					if len(buf.B) != sz {
						panic("bad make")
					}
					time.Sleep(chaosSleep(r))
					_ = buf.Done()
				}
			})
		}}, Case{fmt.Sprintf("retries=%d/impl=bufpool-model", retries), func(b *testing.B) {
			harness(b, func(r *rand.Rand) {
				for range rounds {
					sz := chaosSize(r)
					buf := m.Make(sz)
					if len(buf.B) != sz {
						panic("bad make")
					}
					time.Sleep(chaosSleep(r))
					buf.Done()
				}
			})
		}})
	}
	p := pool.NewSized(pool.SizedOptions{})
	cs = append(cs, Case{"retries=none/impl=zeroio-sized", func(b *testing.B) {
		harness(b, func(r *rand.Rand) {
			for range rounds {
				sz := chaosSize(r)
				buf := p.Get(sz)
				time.Sleep(chaosSleep(r))
				p.Put(buf)
			}
		})
	}})
	return cs
}
