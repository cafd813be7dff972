package bench

import (
	"sync"
	"sync/atomic"
)

// bufpoolModel reproduces the design that github.com/jsign/bufpool's README
// describes, for running its benchmarks beside zeroio's Arena in
// one process: the module itself is not served by the Go module proxy. It is
// our own code, written from that description: shards live in a sync.Pool;
// Make tries up to maxRetries pooled shards for room (or for a shard whose
// buffers were all returned, which restarts at offset 0), else makes a new
// shard; handles are values that share the shard's counter by pointer, and
// examined shards are put back when Make returns (the defer the README's
// allocation figures include).
type bufpoolModel struct {
	size       int
	maxRetries int
	shards     sync.Pool
}

type bpShard struct {
	b    []byte
	refs atomic.Int64
	off  int
}

type bpBuffer struct {
	B    []byte
	refs *atomic.Int64
}

func newBufpoolModel(size, retries int) *bufpoolModel {
	m := &bufpoolModel{size: size, maxRetries: retries}
	m.shards.New = func() any { return &bpShard{b: make([]byte, size)} }
	return m
}

func (m *bufpoolModel) Make(n int) bpBuffer {
	if n == 0 || n >= m.size {
		return bpBuffer{B: make([]byte, n)}
	}
	var s *bpShard
	for i := 0; i < m.maxRetries && s == nil; i++ {
		st := m.shards.Get().(*bpShard)
		defer m.shards.Put(st)
		switch {
		case st.off+n < len(st.b):
			s = st
		case st.refs.Load() == 0:
			s = st
			s.off = 0
		}
	}
	if s == nil {
		s = m.shards.New().(*bpShard)
		defer m.shards.Put(s)
	}
	s.refs.Add(1)
	b := s.b[s.off : s.off+n : s.off+n]
	s.off += n
	return bpBuffer{B: b, refs: &s.refs}
}

func (b *bpBuffer) Done() {
	if b.refs != nil {
		b.refs.Add(-1)
		b.refs = nil
	}
}
