package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zeroio/zeroio/relay"
)

type metricsServer struct {
	*httpServer
	// draining is set when shutdown begins: /healthz then answers 503 so
	// that a load balancer or orchestrator stops sending new clients
	// while established connections finish.
	draining atomic.Bool
}

// startMetrics serves /metrics and /healthz on ln.
func startMetrics(ln net.Listener, rs *relay.Server, log *slog.Logger) *metricsServer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		relayCollector{rs},
	)
	m := &metricsServer{}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.healthz)
	m.httpServer = serveHTTP(ln, mux, func(err error) { log.Error("metrics server failed", "err", err) })
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return m
}

// healthz answers 200 "ok" while the relay serves and 503 "shutting down"
// once a shutdown has begun.
func (m *metricsServer) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if m.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "shutting down\n")
		return
	}
	io.WriteString(w, "ok\n")
}

// checkMetricsAddr refuses a metrics address that is not host:port with
// an explicit host.
func checkMetricsAddr(addr string) error {
	return checkHostPort("metrics", "127.0.0.1:9100", addr)
}

func (m *metricsServer) close() {
	if m != nil {
		m.httpServer.close()
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("zeroio_relay_"+name, help, append([]string{"route"}, labels...), nil)
}

var (
	mActive   = desc("connections_active", "Stream relays in progress.")
	mAccepted = desc("connections_accepted_total", "Stream connections accepted.")
	mRelayed  = desc("connections_relayed_total", "Stream relays completed.")
	mRejected = desc("connections_rejected_total", "Connections refused, by reason.", "reason")
	mBytes    = desc("bytes_total", "Bytes relayed; up is client to target.", "direction")
	mErrors   = desc("errors_total", "Errors by kind.", "kind")
	mSessions = desc("udp_sessions", "UDP sessions open.")
	mSessTot  = desc("udp_sessions_total", "UDP sessions started.")
	mPackets  = desc("udp_datagrams_total", "UDP datagrams relayed; up is client to target.", "direction")
	mDrops    = desc("udp_drops_total", "UDP datagrams dropped, by reason.", "reason")
	mMoved    = desc("udp_sessions_moved_total", "UDP sessions that followed their QUIC connection ID to a new client address.")
	mStale    = desc("udp_sessions_stale_total", "UDP sessions ended because a new QUIC connection came from their client's address.")
	mMaxDur   = desc("max_duration_total", "Stream connections closed, and UDP sessions ended, at max_duration.")
	mPacedB   = desc("paced_bytes_total", "Bytes moved by connections (UDP: sessions) with an upload or download rate.")
	mPacedT   = desc("paced_seconds_total", "Time paced directions of connections waited for their rate, summed over directions.")

	// A listen address shared by routes turns some clients away before
	// any route is chosen: those carry the address, not a route.
	mHelloRejected = prometheus.NewDesc("zeroio_relay_listen_rejected_total",
		"Clients of a listen address closed before a route was chosen, by reason: unmatched (no route takes the ClientHello, or its absence), hello_timeout, hello_malformed, hello_too_large, proxy_header, untrusted.",
		[]string{"listen", "reason"}, nil)

	// A UDP listen address shared by routes sends a client whose first
	// datagrams carry no readable QUIC ClientHello to its default route.
	mUDPUnrouted = prometheus.NewDesc("zeroio_relay_listen_udp_unrouted_total",
		"Clients of a UDP listen address shared by routes that were not routed by a QUIC ClientHello, by reason: not_quic, quic_version, undecryptable, malformed, too_large, hello_timeout, held_limit. Each went to the default route, or was dropped if there is none.",
		[]string{"listen", "reason"}, nil)
	mUDPUnroutedDrops = prometheus.NewDesc("zeroio_relay_listen_udp_dropped_total",
		"Datagrams of a UDP listen address shared by routes dropped because no route took their client, and (reason truncated) datagrams longer than the receive buffer.",
		[]string{"listen", "reason"}, nil)
	mUDPHeld = prometheus.NewDesc("zeroio_relay_listen_udp_held_clients",
		"Clients of a UDP listen address shared by routes whose datagrams are held until their QUIC ClientHello is whole.",
		[]string{"listen"}, nil)

	mLoopConns = prometheus.NewDesc("zeroio_relay_event_loop_connections",
		"Connections each loop of the event engine serves (a new connection goes to the loop with the fewest).",
		[]string{"loop"}, nil)

	mPaused       = desc("accept_paused_seconds_total", "Time the route's accept loops waited at a connection limit or the descriptor budget, clients queueing in the listen backlog meanwhile.")
	mPausedNow    = desc("accept_paused", "1 while an accept loop of the route waits at a limit.")
	mTargetUp     = desc("target_up", "1 if the target takes clients, 0 if a failed dial or health checks marked it down.", "target")
	mTargetWeight = desc("target_weight", "The target's weight.", "target")
	mTargetActive = desc("target_connections_active", "Connections relayed to the target now.", "target")
	mTargetConns  = desc("target_connections_total", "Connections relayed to the target.", "target")
	mTargetFails  = desc("target_dial_failures_total", "Dials to the target that failed or timed out (each client then tried another target).", "target")
	mTargetBytes  = desc("target_bytes_total", "Bytes relayed through the target, counted as each connection ends; up is client to target.", "target", "direction")
)

// relayCollector reads relay.Server.Stats on every scrape.
type relayCollector struct{ s *relay.Server }

func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mActive, mAccepted, mRelayed, mRejected, mBytes, mErrors, mSessions, mSessTot, mPackets, mDrops, mMoved, mStale,
		mMaxDur, mPacedB, mPacedT,
		mPaused, mPausedNow, mTargetUp, mTargetWeight, mTargetActive, mTargetConns, mTargetFails, mTargetBytes, mHelloRejected, mUDPUnrouted, mUDPUnroutedDrops, mUDPHeld, mLoopConns} {
		ch <- d
	}
	describeLibStats(ch)
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), l...)
	}
	st := c.s.Stats()
	for i, n := range st.Loops {
		ch <- prometheus.MustNewConstMetric(mLoopConns, prometheus.GaugeValue, float64(n), strconv.Itoa(i))
	}
	for _, f := range st.Fronts {
		for _, v := range []struct {
			n      uint64
			reason string
		}{
			{f.Unmatched, "unmatched"}, {f.HelloTimeouts, "hello_timeout"}, {f.HelloMalformed, "hello_malformed"},
			{f.HelloTooLarge, "hello_too_large"}, {f.ProxyHeaderErrors, "proxy_header"}, {f.Untrusted, "untrusted"},
		} {
			counter(mHelloRejected, v.n, f.Listen, v.reason)
		}
		if u := f.UDP; u != nil {
			collectUDPFront(ch, f.Listen, u)
		}
	}
	for _, r := range st.Routes {
		n := r.Name
		gauge(mActive, r.Active, n)
		counter(mAccepted, r.Accepted, n)
		counter(mRelayed, r.Relayed, n)
		counter(mRejected, r.Denied, n, "acl")
		counter(mRejected, r.OverLimit, n, "limit")
		counter(mRejected, r.RateLimited, n, "rate")
		counter(mBytes, r.BytesUp, n, "up")
		counter(mBytes, r.BytesDown, n, "down")
		counter(mErrors, r.AcceptErrors, n, "accept")
		counter(mErrors, r.DialErrors, n, "dial")
		counter(mErrors, r.ProxyHeaderErrors, n, "proxy_header")
		counter(mErrors, r.CopyErrors, n, "copy")
		counter(mErrors, r.IdleTimeouts, n, "idle_timeout")
		gauge(mSessions, r.Sessions, n)
		counter(mSessTot, uint64(r.SessionsTotal), n)
		counter(mPackets, r.PacketsUp, n, "up")
		counter(mPackets, r.PacketsDown, n, "down")
		counter(mDrops, r.DropsSessionLimit, n, "session_limit")
		counter(mDrops, r.DropsWriteError, n, "write_error")
		counter(mDrops, r.DropsTruncated, n, "truncated")
		counter(mMoved, r.SessionsMoved, n)
		counter(mStale, r.SessionsStale, n)
		counter(mDrops, r.DropsSessionRate, n, "session_rate")
		counter(mDrops, r.DropsPaced, n, "paced")
		counter(mMaxDur, r.MaxDurationEnds, n)
		counter(mPacedB, r.PacedBytes, n)
		ch <- prometheus.MustNewConstMetric(mPacedT, prometheus.CounterValue, r.PacedTime.Seconds(), n)
		ch <- prometheus.MustNewConstMetric(mPaused, prometheus.CounterValue, r.Paused.Seconds(), n)
		paused := int64(0)
		if r.AcceptPaused {
			paused = 1
		}
		gauge(mPausedNow, paused, n)
		for _, t := range r.Targets {
			up := int64(0)
			if t.Up {
				up = 1
			}
			gauge(mTargetUp, up, n, t.Addr)
			gauge(mTargetWeight, int64(t.Weight), n, t.Addr)
			gauge(mTargetActive, t.Active, n, t.Addr)
			counter(mTargetConns, t.Connections, n, t.Addr)
			counter(mTargetFails, t.DialErrors, n, t.Addr)
			counter(mTargetBytes, t.BytesUp, n, t.Addr, "up")
			counter(mTargetBytes, t.BytesDown, n, t.Addr, "down")
		}
	}
	collectLibStats(ch)
}

// collectUDPFront sends the counters of a UDP listen address shared by
// routes.
func collectUDPFront(ch chan<- prometheus.Metric, listen string, u *relay.UDPFrontStats) {
	for _, v := range []struct {
		n      uint64
		reason string
	}{
		{u.NotQUIC, "not_quic"}, {u.Version, "quic_version"}, {u.Undecryptable, "undecryptable"},
		{u.Malformed, "malformed"}, {u.TooLarge, "too_large"}, {u.HelloTimeouts, "hello_timeout"}, {u.HeldLimit, "held_limit"},
	} {
		ch <- prometheus.MustNewConstMetric(mUDPUnrouted, prometheus.CounterValue, float64(v.n), listen, v.reason)
	}
	ch <- prometheus.MustNewConstMetric(mUDPUnroutedDrops, prometheus.CounterValue, float64(u.Dropped), listen, "no_route")
	ch <- prometheus.MustNewConstMetric(mUDPUnroutedDrops, prometheus.CounterValue, float64(u.DropsTruncated), listen, "truncated")
	ch <- prometheus.MustNewConstMetric(mUDPHeld, prometheus.GaugeValue, float64(u.Held), listen)
}
