package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/splice"
)

// The splice and pool packages' process-wide counters, exported beside
// the relay's.
var (
	mCopies = prometheus.NewDesc("zeroio_splice_copies_total",
		"Stream copies by the path that moved their last bytes (splice, sendfile, copy_file_range, buffer).", []string{"path"}, nil)
	mCopyBytes = prometheus.NewDesc("zeroio_splice_bytes_total",
		"Bytes copied, by path.", []string{"path"}, nil)
	mFallbacks = prometheus.NewDesc("zeroio_splice_fallbacks_total",
		"Copies where the kernel refused a zero-copy path and another took over.", nil, nil)
	mPipes = prometheus.NewDesc("zeroio_splice_pipes_in_use",
		"Pipes held by copies now (idle relays hold none).", nil, nil)
	mBuffers = prometheus.NewDesc("zeroio_splice_buffers_in_use",
		"Pooled buffers held by buffered copies now.", nil, nil)
	mPoolGets = prometheus.NewDesc("zeroio_pool_gets_total",
		"Buffers handed out by the default pool, by result (hit: reused, miss: allocated).", []string{"result"}, nil)
	mPoolHeld = prometheus.NewDesc("zeroio_pool_bytes_held",
		"Memory the default pool keeps alive.", nil, nil)
	mPoolOut = prometheus.NewDesc("zeroio_pool_outstanding",
		"Buffers handed out and not yet returned.", nil, nil)
)

func describeLibStats(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mCopies, mCopyBytes, mFallbacks, mPipes, mBuffers, mPoolGets, mPoolHeld, mPoolOut} {
		ch <- d
	}
}

func collectLibStats(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	s := splice.ReadStats()
	c(mCopies, s.SpliceCopies, "splice")
	c(mCopies, s.SendfileCopies, "sendfile")
	c(mCopies, s.CopyFileRangeCopies, "copy_file_range")
	c(mCopies, s.BufferCopies, "buffer")
	c(mCopyBytes, s.SpliceBytes, "splice")
	c(mCopyBytes, s.SendfileBytes, "sendfile")
	c(mCopyBytes, s.CopyFileRangeBytes, "copy_file_range")
	c(mCopyBytes, s.BufferBytes, "buffer")
	c(mFallbacks, s.Fallbacks)
	g(mPipes, float64(s.PipesInUse))
	g(mBuffers, float64(s.BuffersInUse))
	p := pool.Default().Stats()
	c(mPoolGets, p.Hits, "hit")
	c(mPoolGets, p.Misses, "miss")
	g(mPoolHeld, float64(p.BytesHeld))
	g(mPoolOut, float64(p.Outstanding))
}
