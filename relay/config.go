package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"
)

// Defaults applied to zero fields of a [Route].
//
// The dial and idle timeouts keep a dead or silent backend from holding
// clients forever. HAProxy has no default for either (it warns when
// "timeout connect", "timeout client" or "timeout server" is missing and
// then waits forever); Envoy's defaults are a 5 s connect timeout
// (cluster connect_timeout) and a 1 h idle timeout (tcp_proxy
// idle_timeout); nginx's stream proxy 60 s and 10 min. zeroio takes
// Envoy's. Either may be turned off with [Never].
const (
	DefaultDialTimeout        = 5 * time.Second
	DefaultIdleTimeout        = time.Hour
	DefaultProxyHeaderTimeout = 5 * time.Second
	// DefaultSessionTimeout is how long a UDP session lives without a
	// datagram in either direction: long enough for a VoIP call on hold.
	DefaultSessionTimeout = 60 * time.Second
	DefaultMaxSessions    = 10000
	DefaultUDPBatch       = 32
	// DefaultUDPBuffer sizes the receive and send buffers of a UDP
	// route's sockets (the listening sockets and each session's): about
	// 1,800 full-size datagrams of 1,400 bytes, so that a burst waits for
	// the relay instead of being dropped (the kernel's default, 208 KiB,
	// holds about 90; wireguard-go asks for 7 MiB). Memory is used only
	// while datagrams queue.
	DefaultUDPBuffer = 4 << 20
)

// Never, as [Route.DialTimeout] or [Route.IdleTimeout], turns the timeout
// off: a dial waits as long as the kernel does (about two minutes of SYN
// retries for TCP), and a relay in which nothing moves lives until one
// side closes.
const Never = time.Duration(1<<63 - 1)

// Route relays every connection or datagram arriving at Listen to one of
// its Targets. Zero fields take the defaults above.
type Route struct {
	// Name identifies the route in logs, metrics and [Server.Update]; it
	// defaults to Listen's string form.
	Name string
	// Listen must carry an explicit host.
	Listen Addr
	// Targets are where clients go, chosen by Balance; stream routes may
	// mix TCP and Unix targets (and pair with either kind of listen
	// address), UDP routes take UDP targets. Target is a shorthand for a
	// single target of weight 1; give one or the other.
	Targets []Target
	Target  Addr
	// Balance spreads new clients over Targets; "" is [RoundRobin].
	Balance Balance
	// HealthCheck configures active health checks; by default health is
	// passive (see [HealthCheck]).
	HealthCheck HealthCheck

	// SNI and ALPN let several stream routes share one Listen address:
	// a client goes to the route whose SNI list holds the server name of
	// its TLS ClientHello (exact names like a.example.com, or wildcards
	// like *.example.com that match any name ending in .example.com;
	// case-insensitive) and, if the route has an ALPN list, which holds
	// one of the protocols the client offers. The most specific route
	// wins: an exact name over a wildcard, a longer wildcard over a
	// shorter, a route with ALPN over one without; among ALPN routes the
	// client's preference decides. The route on the address with neither
	// is the default: it takes clients that send no ClientHello (another
	// protocol), no server name, or one no route takes; without one,
	// such clients are closed. The hello is read without being consumed:
	// the target receives every byte the client sent. UDP routes share
	// an address the same way, by the ClientHello a QUIC client sends
	// in its Initial packets (QUIC versions 1 and 2), which the relay
	// decrypts and reassembles, holding a client's first datagrams (a
	// few, for a couple of seconds) until the hello is whole; a client
	// that sends no readable hello goes to the default route. Routes
	// that could match the same client equally are a configuration
	// error. Routes sharing an address must agree on Workers,
	// AcceptProxy, TrustedProxies, ProxyHeaderTimeout, PeekTimeout,
	// UDPBuffer and the Unix socket settings.
	SNI, ALPN []string
	// PeekTimeout bounds how long a client on an address shared by
	// several routes (or whose only route has SNI or ALPN) has to send
	// its ClientHello, after any PROXY header; 0 is DefaultPeekTimeout.
	PeekTimeout time.Duration
	// ListenOverlap allows this route to listen on a specific address of
	// a port on which another route listens on the wildcard address
	// (0.0.0.0 or ::) of the same protocol, or the other way round.
	// Without it that is refused: the kernel gives each client to the
	// most specific socket, so one route silently shadows the other for
	// some clients, and with Workers both bind where one would fail.
	ListenOverlap bool

	// Workers is the number of listening sockets in one SO_REUSEPORT
	// group (Linux): TCP listeners that share accepting, or UDP sockets
	// that share reading, each with its own goroutine (the kernel hashes
	// each client to one of them). 0 or 1 is one socket; a Unix listen
	// address refuses more.
	Workers int
	// DialTimeout bounds connecting to Target.
	DialTimeout time.Duration
	// IdleTimeout closes a stream relay in which no byte moved in either
	// direction for this long, also in the middle of a splice; 0 is never.
	IdleTimeout time.Duration
	// MaxConns limits this route's concurrent stream relays and
	// MaxConnsPerClient those from one client IP address; 0 is no limit.
	// At MaxConns the route's listeners are not read and clients wait in
	// the listen backlog; a client already accepted (its route chosen by
	// its ClientHello) waits for a slot. A client over MaxConnsPerClient
	// is accepted and closed at once.
	MaxConns, MaxConnsPerClient int
	// ConnRatePerClient limits how fast one client IP address may open
	// new connections (on a UDP route, sessions): a token bucket holding
	// one period's worth (10/s lets a burst of 10 through, then one every
	// 100 ms). A connection over it is closed at once, before a target is
	// dialled; a UDP datagram that would start a session over it is
	// dropped. The zero value is no limit.
	ConnRatePerClient ConnRate
	// UploadRate and DownloadRate limit each connection's bytes per
	// second client to target and target to client (on a UDP route, each
	// session's datagrams, paced through a small queue and dropped
	// beyond it); ClientUploadRate and ClientDownloadRate limit the bytes
	// of all of one client IP address's connections together (stream
	// routes only). A paced connection moves its bytes in chunks, by
	// splice(2) where the relay splices, and waits between them; a wait
	// is not idleness for IdleTimeout. 0 is no limit.
	UploadRate, DownloadRate             ByteRate
	ClientUploadRate, ClientDownloadRate ByteRate
	// MaxDuration closes a connection (ends a UDP session) this long
	// after it was accepted, whatever its traffic; 0 or [Never] is never.
	MaxDuration time.Duration
	// Allow and Deny are the access lists for client addresses: a match in
	// Deny refuses; if Allow is not empty, only matches are admitted.
	// Clients without an IP address (Unix sockets) are admitted only when
	// Allow is empty.
	Allow, Deny []netip.Prefix
	// SendProxy writes a PROXY protocol header of this version (1 or 2)
	// to Target before any data; 0 sends none. A UDP route sends v2
	// only, at the start of every datagram (v1 has no datagram form).
	SendProxy int
	// AcceptProxy requires a PROXY protocol header (v1 or v2) from each
	// client, read within ProxyHeaderTimeout; the client address it names
	// is then the one used by access lists, limits, logs and SendProxy.
	// If TrustedProxies is not empty, only peers inside it may connect.
	// On a UDP route every datagram must start with a v2 header; one
	// without is dropped and counted, and replies go to the proxy.
	AcceptProxy        bool
	TrustedProxies     []netip.Prefix
	ProxyHeaderTimeout time.Duration
	// KeepAlive turns TCP keep-alive on for both of a connection's
	// sockets, probing after this long idle (TCP_KEEPIDLE; Go's
	// default interval and count). 0, the default, is
	// no keep-alive and no system call to set it, as HAProxy's default:
	// IdleTimeout is what ends a silent connection.
	KeepAlive time.Duration
	// Nagle enables Nagle's algorithm (clears TCP_NODELAY) on both sides;
	// by default segments leave at once.
	Nagle bool
	// UnixMode sets the permission bits of a Unix listen socket's file:
	// connecting needs write permission, so 0660 admits the file's group
	// and 0600 only its owner. On Linux the socket gets these bits before
	// it is bound, so the file is never more open than asked (the process
	// umask may close it further for an instant); elsewhere the file is
	// created under the umask and then changed. 0 leaves the default: 0777
	// less the umask. Only for a Unix listen path, not an abstract name
	// (which has no file), and not on Windows.
	UnixMode os.FileMode
	// UnixUser and UnixGroup set the owner and group of a Unix listen
	// socket's file, each a name or a numeric id; empty keeps the
	// process's. Giving the file away needs privilege (CAP_CHOWN); any
	// process may pick a group it belongs to. Same limits as UnixMode.
	UnixUser, UnixGroup string

	// SessionTimeout ends a UDP session idle for this long.
	SessionTimeout time.Duration
	// UDPBuffer is the receive and send buffer size, in bytes, of a UDP
	// route's listening sockets and of each session's upstream socket
	// (SO_RCVBUF, SO_SNDBUF; SO_RCVBUFFORCE and SO_SNDBUFFORCE first,
	// which a privileged process may use past net.core.rmem_max and
	// wmem_max; otherwise the kernel caps it there). A reload resizes the
	// listening sockets; sessions under way keep theirs.
	UDPBuffer int
	// MaxSessions limits concurrent UDP sessions; datagrams from new
	// clients over the limit are dropped and counted.
	MaxSessions int
	// QUICLB routes a QUIC client to the target whose server ID its
	// connection ID carries, whatever address it comes from (UDP routes
	// only; nil for none). See [QUICLB].
	QUICLB *QUICLB

	// own is UnixUser and UnixGroup resolved to ids by validate, so the
	// bind does not look them up again; nil keeps the process's.
	own *owner
}

// Config is everything a [Server] needs. The relay package reads no flags
// or files: cmd/zeroio builds a Config from them.
type Config struct {
	Routes []Route
	// MaxConns limits concurrent stream relays over all routes; 0 is no
	// limit.
	MaxConns int
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// Engine picks how stream routes move bytes: EngineEvent (event
	// loops, Linux only), EngineGoroutine (goroutines per connection,
	// every platform), or "" for the platform's best. [New] reads it;
	// [Server.Update] keeps the engine the Server started with.
	Engine string
	// ConnLog is the level of the line logged for each finished stream
	// connection (client, route, target, bytes each way, duration, why it
	// ended); nil is slog.LevelDebug, and [ConnLogOff] logs none. Whether
	// a line is written is then up to Logger's handler. [Server.Update]
	// applies a new level.
	ConnLog slog.Leveler
	// Resolver is the DNS server that the names of dynamic targets (SRV
	// targets and those with [ResolveAll]; see [Target]) are asked of;
	// the zero value asks the nameservers of /etc/resolv.conf, and
	// 127.0.0.1:53 without one. Other host names are resolved by the
	// system's resolver, as package net's dialer does.
	Resolver netip.AddrPort
	// DNSMinTTL and DNSMaxTTL bound how long a dynamic target's DNS
	// answer is kept before it is asked again, whatever its TTL; 0 is
	// [DefaultDNSMinTTL] and [DefaultDNSMaxTTL].
	DNSMinTTL, DNSMaxTTL time.Duration

	// noSplice, for tests, has the engines move bytes through buffers
	// only, never by splice(2).
	noSplice bool
}

// withDefaults returns r with zero fields filled in.
func (r Route) withDefaults() Route {
	if r.Name == "" {
		r.Name = r.Listen.String()
	}
	if r.Workers == 0 {
		r.Workers = 1
	}
	if len(r.Targets) == 0 && r.Target.Network != "" {
		r.Targets = []Target{{Addr: r.Target, Weight: 1}}
	}
	if r.Balance == "" {
		r.Balance = RoundRobin
	}
	// Negative durations are left for validate to refuse. Never becomes
	// 0 for the engines, which read 0 as no timeout.
	switch r.DialTimeout {
	case 0:
		r.DialTimeout = DefaultDialTimeout
	case Never:
		r.DialTimeout = 0
	}
	switch r.IdleTimeout {
	case 0:
		r.IdleTimeout = DefaultIdleTimeout
	case Never:
		r.IdleTimeout = 0
	}
	if r.MaxDuration == Never {
		r.MaxDuration = 0
	}
	if r.ProxyHeaderTimeout == 0 {
		r.ProxyHeaderTimeout = DefaultProxyHeaderTimeout
	}
	if r.PeekTimeout == 0 {
		r.PeekTimeout = DefaultPeekTimeout
	}
	if r.SessionTimeout == 0 {
		r.SessionTimeout = DefaultSessionTimeout
	}
	if r.MaxSessions == 0 {
		r.MaxSessions = DefaultMaxSessions
	}
	if r.UDPBuffer == 0 {
		r.UDPBuffer = DefaultUDPBuffer
	}
	return r
}

func (r *Route) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Listen.Network == "" {
		bad("no listen address")
	}
	r.validateTargets(bad)
	r.validateQUICLB(bad)
	if err := r.Listen.checkPath(); err != nil {
		bad("listen: %v", err)
	}
	for _, t := range r.Targets {
		if err := t.Addr.checkPath(); err != nil {
			bad("target: %v", err)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"dial timeout", r.DialTimeout}, {"idle timeout", r.IdleTimeout},
		{"PROXY header timeout", r.ProxyHeaderTimeout}, {"session timeout", r.SessionTimeout},
		{"peek timeout", r.PeekTimeout},
		{"keep-alive period", r.KeepAlive},
	} {
		switch {
		case d.v < 0:
			bad("%s %v is negative (0 is the default)", d.name, d.v)
		case d.v == Never && d.name != "dial timeout" && d.name != "idle timeout":
			bad("%s cannot be never", d.name)
		}
	}
	r.validateLimits(bad)
	if err := checkSNI(r); err != nil {
		bad("%v", err)
	}
	if len(r.TrustedProxies) > 0 && !r.AcceptProxy {
		bad("trusted proxies need accept_proxy: without it no PROXY header is read")
	}
	if r.Workers > 1 && r.Listen.Network == "unix" {
		bad("workers > 1 needs a TCP or UDP listen address (a Unix socket path has one listener)")
	}
	if r.SendProxy < 0 || r.SendProxy > 2 {
		bad("PROXY protocol version %d: want 1 or 2", r.SendProxy)
	}
	if r.Listen.Datagram() && r.SendProxy == 1 {
		bad("PROXY protocol v1 has no datagram form: a UDP route sends v2 (send_proxy: 2)")
	}
	if r.MaxConns < 0 || r.MaxConnsPerClient < 0 || r.MaxSessions < 0 {
		bad("negative connection or session limit")
	}
	if r.Workers < 0 {
		bad("negative workers")
	}
	if r.UDPBuffer < 0 {
		bad("negative UDP buffer size")
	}
	if r.UnixMode&^os.ModePerm != 0 {
		bad("unix mode %#o: want permission bits only (at most 0777)", uint32(r.UnixMode))
	}
	if r.UnixMode != 0 || r.UnixUser != "" || r.UnixGroup != "" {
		switch {
		case r.Listen.Network != "unix" || strings.HasPrefix(r.Listen.Address, "@"):
			bad("unix mode, user and group need a Unix socket path to listen on, not %s", r.Listen)
		case runtime.GOOS == "windows":
			bad("unix mode, user and group are not supported on windows")
		}
	}
	if r.UnixUser != "" || r.UnixGroup != "" {
		if own, err := lookupOwner(r.UnixUser, r.UnixGroup); err != nil {
			bad("%v", err)
		} else {
			r.own = &own
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("route %q: %w", r.Name, err)
	}
	return nil
}

// normalize fills defaults and validates every route of c.
func (c Config) normalize() (Config, error) {
	out := c
	out.Routes = make([]Route, len(c.Routes))
	names := map[string]bool{}
	var errs []error
	if c.MaxConns < 0 {
		errs = append(errs, errors.New("negative global connection limit"))
	}
	if err := checkEngine(c.Engine); err != nil {
		errs = append(errs, err)
	}
	if err := c.checkDNS(); err != nil {
		errs = append(errs, err)
	}
	for i, r := range c.Routes {
		if err := r.checkKind(); err != nil {
			errs = append(errs, err)
		}
		r = r.withDefaults()
		if err := r.validate(); err != nil {
			errs = append(errs, err)
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("route %q: name used twice", r.Name))
		}
		names[r.Name] = true
		out.Routes[i] = r
	}
	errs = append(errs, checkLoops(out.Routes)...)
	errs = append(errs, checkFronts(out.Routes)...)
	if len(c.Routes) == 0 {
		errs = append(errs, errors.New("no routes"))
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, errors.Join(errs...)
}

// checkDNS checks the resolver and the TTL bounds.
func (c Config) checkDNS() error {
	lo, hi := cmp0(c.DNSMinTTL, DefaultDNSMinTTL), cmp0(c.DNSMaxTTL, DefaultDNSMaxTTL)
	switch {
	case c.DNSMinTTL < 0 || c.DNSMaxTTL < 0:
		return errors.New("negative DNS TTL bound")
	case lo > hi:
		return fmt.Errorf("DNS TTL bounds: minimum %v above maximum %v", lo, hi)
	case c.Resolver.IsValid() && c.Resolver.Port() == 0:
		return fmt.Errorf("resolver %s: port 0", c.Resolver)
	}
	return nil
}
