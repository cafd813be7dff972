package relay

import (
	"context"
	"log/slog"
	"net/netip"
	"time"
)

// ConnLogOff is the [Config.ConnLog] level that logs no line per
// connection.
const ConnLogOff = slog.Level(1 << 20)

// endReason is why a relayed connection ended.
type endReason uint8

const (
	endClientClosed endReason = iota + 1 // the client's EOF came first
	endTargetClosed                      // the target's EOF came first
	endIdle                              // nothing moved for IdleTimeout
	endReset                             // a read or write failed (a reset, mostly)
	endShutdown                          // Shutdown's deadline or Close
	endNoTarget                          // no target answered the dial
	endClosed                            // Server.CloseStream
	endMaxDuration                       // open for MaxDuration
)

var endNames = [...]string{
	endClientClosed: "client closed",
	endTargetClosed: "target closed",
	endIdle:         "idle timeout",
	endReset:        "reset",
	endShutdown:     "shutdown",
	endNoTarget:     "no target answered",
	endClosed:       "closed",
	endMaxDuration:  "max duration",
}

func (e endReason) String() string {
	if int(e) < len(endNames) && endNames[e] != "" {
		return endNames[e]
	}
	return "ended"
}

// logEnd writes the line for one finished connection, as HAProxy's
// tcplog: client, route, target, bytes each way (up is client to
// target), duration and why it ended, at the Config's ConnLog level.
// b is nil when no target was reached; dur is how long the connection
// lasted, in nanoseconds.
func (rt *route) logEnd(client netip.AddrPort, b *backend, up, down uint64, dur int64, why endReason) {
	if !rt.srv.connLogOn() {
		return
	}
	log, lvl, ctx := rt.srv.log, rt.srv.connLog.Level(), context.Background()
	c, t := "-", "-"
	if client.IsValid() {
		c = client.String()
	}
	if b != nil {
		t = b.name
	}
	log.LogAttrs(ctx, lvl, "connection",
		slog.String("client", c), slog.String("route", rt.name), slog.String("target", t),
		slog.Uint64("bytes_up", up), slog.Uint64("bytes_down", down),
		slog.Duration("duration", time.Duration(dur)), slog.String("end", why.String()))
}

// badProxy logs a client's bad PROXY header, on the route or listen
// address (key) named name, as pauseLog paces it: a client that sends
// garbage, or resets before its header, on every connection must not
// write a line each. The others are logged at debug level.
func (s *Server) badProxy(p *pauseLog, key, name string, client netip.AddrPort, err error) {
	switch begins, n := p.note(); {
	case begins:
		s.log.Info("bad PROXY header", key, name, "client", client, "err", err)
	case n > 0:
		s.log.Info("still receiving bad PROXY headers", key, name, "clients", n, "err", err)
	case s.log.Enabled(context.Background(), slog.LevelDebug):
		s.log.Debug("bad PROXY header", key, name, "client", client, "err", err)
	}
}

// connLogOn reports whether a finished connection is logged: its level is
// not ConnLogOff, which a handler's minimum level does not filter out (a
// handler enables every level from its minimum up), and the handler
// enables it.
func (s *Server) connLogOn() bool {
	lvl := s.connLog.Level()
	return lvl < ConnLogOff && s.log.Enabled(context.Background(), lvl)
}

// setConnLog takes cfg's ConnLog level.
func (s *Server) setConnLog(cfg Config) {
	lvl := slog.LevelDebug
	if cfg.ConnLog != nil {
		lvl = cfg.ConnLog.Level()
	}
	s.connLog.Set(lvl)
}
