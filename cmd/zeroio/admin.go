package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// The admin API: JSON over HTTP on a loopback address or a Unix socket
// (--admin), to see the routes, targets and streams of a running relay
// and change them until the next reload. Everything it does is
// relay.Server's plain Go API; this file only speaks HTTP.

const (
	defaultAdmin     = "127.0.0.1:9901"
	defaultConnLimit = 1000
	maxConnLimit     = 10000
)

// adminServer is the admin API's HTTP server.
type adminServer struct{ *httpServer }

// adminListenAddr splits an --admin address into a network and an
// address: unix:///path (or unix://@name) for a Unix socket, host:port
// for TCP. A TCP host must be a loopback address unless remote is set.
func adminListenAddr(addr string, remote bool) (network, address string, err error) {
	if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
		if rest == "" {
			return "", "", fmt.Errorf("admin address %q has no socket path: write unix:///run/zeroio/admin.sock", addr)
		}
		return "unix", rest, nil
	}
	if err := checkHostPort("admin", defaultAdmin, addr); err != nil {
		return "", "", err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); (perr == nil && ip.IsLoopback()) || host == "localhost" || remote {
		return "tcp", addr, nil
	}
	return "", "", fmt.Errorf("admin address %q is not a loopback address: the admin API changes the relay and has no authentication; use 127.0.0.1, [::1] or a Unix socket, or allow it with --admin-allow-remote", addr)
}

// listenAdminAux opens the admin API's listener on addr, or in a process
// started by an upgrade takes the old process's if it is at addr.
func listenAdminAux(in *inherited, addr string, remote bool) (net.Listener, error) {
	network, address, err := adminListenAddr(addr, remote)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		return in.listen("admin", address)
	}
	if in != nil && in.lns["admin"] != nil {
		ln := in.lns["admin"]
		delete(in.lns, "admin")
		if ln.Addr().String() == address {
			return ln, nil
		}
		ln.Close()
	}
	return listenAdmin(network, address)
}

// startAdmin serves the admin API for rs on addr.
func startAdmin(addr string, remote bool, rs *relay.Server, log *slog.Logger) (*adminServer, error) {
	ln, err := listenAdminAux(nil, addr, remote)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return serveAdmin(ln, rs, log), nil
}

// serveAdmin serves the admin API for rs on ln.
func serveAdmin(ln net.Listener, rs *relay.Server, log *slog.Logger) *adminServer {
	h := &adminHandler{rs: rs, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /routes", h.routes)
	mux.HandleFunc("GET /conns", h.conns)
	mux.HandleFunc("POST /conns/close", h.closeConn)
	mux.HandleFunc("POST /targets/{action}", h.target)
	s := serveHTTP(ln, mux, func(err error) { log.Error("admin server failed", "err", err) })
	log.Info("admin", "addr", ln.Addr().Network()+"://"+ln.Addr().String())
	return &adminServer{s}
}

// listenAdmin listens on the admin address. A Unix socket file left by
// a process that is gone is replaced, and the socket is for its owner
// alone (0600). The file stays when the listener closes: after an
// upgrade, the new process serves on it.
func listenAdmin(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if network != "unix" || strings.HasPrefix(address, "@") {
		return ln, err
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if fi, serr := os.Lstat(address); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, derr := net.DialTimeout("unix", address, time.Second); derr != nil {
				os.Remove(address)
				ln, err = net.Listen(network, address)
			} else {
				c.Close()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(address, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func (a *adminServer) close() {
	if a != nil {
		a.httpServer.close()
	}
}

// adminHandler answers the admin API's requests.
type adminHandler struct {
	rs  *relay.Server
	log *slog.Logger
}

// adminRoute is a route in GET /routes.
type adminRoute struct {
	Name    string        `json:"name"`
	Listen  string        `json:"listen"`
	Active  int64         `json:"active"`
	Targets []adminTarget `json:"targets"`
}

// adminTarget is a target in GET /routes.
type adminTarget struct {
	Target string `json:"target"`
	// From is the DNS target a discovered backend comes from, Priority
	// its SRV priority.
	From     string `json:"from,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// State is up or down (its health), or draining or disabled as an
	// operator set it.
	State       string `json:"state"`
	Health      string `json:"health"`
	Weight      int    `json:"weight"`
	Active      int64  `json:"active"`
	Connections uint64 `json:"connections"`
	DialErrors  uint64 `json:"dial_errors"`
	BytesUp     uint64 `json:"bytes_up"`
	BytesDown   uint64 `json:"bytes_down"`
}

func (h *adminHandler) routes(w http.ResponseWriter, _ *http.Request) {
	st := h.rs.Stats()
	out := struct {
		Routes []adminRoute `json:"routes"`
	}{Routes: []adminRoute{}}
	for _, r := range st.Routes {
		ar := adminRoute{Name: r.Name, Listen: r.Listen, Active: r.Active, Targets: []adminTarget{}}
		for _, t := range r.Targets {
			ar.Targets = append(ar.Targets, targetView(t))
		}
		out.Routes = append(out.Routes, ar)
	}
	writeJSON(w, http.StatusOK, out)
}

// targetView is t as GET /routes shows it.
func targetView(t relay.TargetStats) adminTarget {
	health := "up"
	if !t.Up {
		health = "down"
	}
	state := health
	switch {
	case t.State != relay.TargetEnabled:
		state = t.State.String()
	case t.Draining: // a reload or a DNS answer dropped it
		state = "draining"
	}
	return adminTarget{
		Target: t.Addr, From: t.From, Priority: t.Priority, State: state, Health: health, Weight: t.Weight, Active: t.Active,
		Connections: t.Connections, DialErrors: t.DialErrors, BytesUp: t.BytesUp, BytesDown: t.BytesDown,
	}
}

// adminConn is a stream in GET /conns.
type adminConn struct {
	ID        uint64  `json:"id"`
	Client    string  `json:"client"`
	Route     string  `json:"route"`
	Target    string  `json:"target"`
	State     string  `json:"state"`
	BytesUp   uint64  `json:"bytes_up"`
	BytesDown uint64  `json:"bytes_down"`
	Age       float64 `json:"age_seconds"`
}

// conns lists a page of streams: ?limit= (default 1000, at most 10000)
// after ?after= (an ID); next is the after of the next page, 0 at the
// end.
func (h *adminHandler) conns(w http.ResponseWriter, r *http.Request) {
	limit, after := defaultConnLimit, uint64(0)
	var err error
	if s := r.FormValue("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxConnLimit {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want 1 to %d", s, maxConnLimit))
			return
		}
	}
	if s := r.FormValue("after"); s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("after %q: want a connection id", s))
			return
		}
	}
	ss := h.rs.Streams(after, limit+1) // one more says whether a page follows
	out := struct {
		Conns []adminConn `json:"conns"`
		Next  uint64      `json:"next"`
	}{Conns: []adminConn{}}
	if len(ss) > limit {
		ss = ss[:limit]
		out.Next = ss[limit-1].ID
	}
	for _, s := range ss {
		client := "unix"
		if s.Client.IsValid() {
			client = s.Client.String()
		}
		out.Conns = append(out.Conns, adminConn{
			ID: s.ID, Client: client, Route: s.Route, Target: s.Target, State: s.State,
			BytesUp: s.BytesUp, BytesDown: s.BytesDown, Age: s.Age.Seconds(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *adminHandler) closeConn(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.FormValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("id %q: want a connection id", r.FormValue("id")))
		return
	}
	if !h.rs.CloseStream(id) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no connection %d", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "closed": true})
}

// target is POST /targets/drain, /disable, /enable (route=, target=)
// and /weight (and weight=, -1 for the configured one).
func (h *adminHandler) target(w http.ResponseWriter, r *http.Request) {
	route, target := r.FormValue("route"), r.FormValue("target")
	if route == "" || target == "" {
		writeError(w, http.StatusBadRequest, errors.New("want route= and target="))
		return
	}
	out := map[string]any{"route": route, "target": target}
	switch action := r.PathValue("action"); action {
	case "drain", "disable", "enable":
		st := map[string]relay.TargetState{"drain": relay.TargetDraining, "disable": relay.TargetDisabled, "enable": relay.TargetEnabled}[action]
		was, err := h.rs.SetTargetState(route, target, st)
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		out["state"], out["was"] = st.String(), was.String()
	case "weight":
		n, err := strconv.Atoi(r.FormValue("weight"))
		if err != nil || n < -1 || n > relay.MaxWeight {
			writeError(w, http.StatusBadRequest, fmt.Errorf("weight %q: want 0 to %d, or -1 for the configured one", r.FormValue("weight"), relay.MaxWeight))
			return
		}
		was, err := h.rs.SetTargetWeight(route, target, n)
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		out["weight"], out["was"] = n, was
	default:
		writeError(w, http.StatusNotFound, fmt.Errorf("unknown action %q: want drain, disable, enable or weight", action))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
