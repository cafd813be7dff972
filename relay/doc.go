// Package relay forwards TCP, Unix-socket and UDP traffic: an L4 relay
// (what socat, HAProxy in mode tcp, or gost do), built on zeroio's splice
// and udp packages.
//
// # Routes
//
// A [Config] lists [Route]s, each relaying one listen [Addr] to one or
// more [Target]s. Stream routes pair any of TCP and Unix sockets; UDP
// routes relay to UDP. Addresses are written as URLs and parsed by
// [ParseAddr]:
//
//	tcp://127.0.0.1:8080   tcp://[::1]:8080   udp://0.0.0.0:53
//	unix:///run/app.sock   unix://@abstract
//
// A listen address must name its host: "tcp://:8080" is refused rather
// than silently opening a port to every network. A Route owns its
// defaults and its validation: [New] and [Server.Update] refuse negative
// durations and limits, options that need another, and targets that
// would relay to the relay itself, each with a one-line error.
//
// # Targets
//
// [Route.Balance] spreads new clients over [Route.Targets] by weight:
// [RoundRobin] (smooth weighted, the default), [LeastConn] or
// [ClientHash] (rendezvous hashing of the client address). A failed or
// timed-out dial marks a target down with a backoff and the client is
// given the next target within [Route.DialTimeout]; [Route.HealthCheck]
// adds periodic connect checks. A UDP session keeps one target for its
// life and moves to another when its target refuses (ECONNREFUSED).
// [Config.ConnLog] logs one line per finished connection.
//
// A target may stand for the backends DNS publishes: an SRV name
// (srv+tcp://_svc._tcp.example.com, srv+udp://...), each record's
// addresses a backend with its weight and priority, or a host name with
// [Target.Resolve] [ResolveAll], each address a backend. They are asked
// of [Config.Resolver] by the relay's own DNS client, again as their
// TTL runs out, and each backend is balanced, checked and counted on
// its own; backends an answer drops drain (see [Target]).
//
// # Streams
//
// For each accepted connection the relay dials the target within
// [Route.DialTimeout] and copies both directions. An EOF in one direction
// becomes a shutdown of writing (CloseWrite) on the other side while the
// opposite direction keeps flowing, so protocols that half-close work.
// [Route.IdleTimeout] ends a relay in which nothing moved in either
// direction, measured by the copy's progress, so a long transfer is never
// cut and a stalled one is. Limits apply globally ([Config.MaxConns]), per
// route and per client IP address; access lists ([Route.Allow],
// [Route.Deny]) admit clients by CIDR. PROXY protocol v1 and v2 headers can
// be sent to the target and accepted from a trusted downstream proxy.
// Each limit acts differently:
//
//   - At the global limit, or at the most relays the descriptor limit
//     allows, and at [Route.MaxConns] of a route alone on its listen
//     address, the listeners are not read: clients wait in the kernel's
//     listen backlog and are accepted as slots free.
//   - On an address shared by routes told apart by their ClientHello,
//     a route's MaxConns is known only once the hello has chosen it: the
//     client is accepted and, its route full, waits connected for a
//     slot, as does a client accepted just as another listener took the
//     last slot, or handed over by a reload. It is closed only if its
//     route stops first.
//   - [Route.MaxConnsPerClient], which needs the client's address,
//     accepts the client and closes it at once.
//   - A UDP route at [Route.MaxSessions] drops the datagrams of new
//     clients, counts them and logs once per episode.
//
// When accept fails for lack of descriptors (EMFILE), the accept loop
// backs off from 5 ms to 1 s instead of spinning, logging once per
// episode.
//
// # Engines
//
// How stream routes move bytes is [Config.Engine]'s choice; both engines
// apply the same policy, limits, counters and logs.
//
//   - [EngineEvent] (Linux, the default there) runs one event loop per
//     CPU (GOMAXPROCS), each an epoll(7) instance of its own. Every loop
//     watches every listener (EPOLLEXCLUSIVE: one loop wakes per new
//     connection) and accepts one connection per turn until EAGAIN. Each
//     connection goes to the loop serving the fewest, which keeps it as
//     a small struct in its slab until it ends: no goroutine, stack or
//     allocation per connection. A loop waits in epoll_wait(2) on a
//     thread of its own (holding its P while busy: those Ps come on top
//     of GOMAXPROCS) and connects without blocking. Sockets are
//     registered edge-triggered once; bytes move through pooled buffers
//     with read(2) and write(2), and a direction that keeps filling the
//     buffer moves through a pipe with splice(2). A timer wheel (10 ms
//     ticks) runs the PROXY header, peek, dial and idle timeouts. An idle
//     connection holds its two sockets and its struct, no buffer or pipe.
//   - [EngineGoroutine] (every platform) relays each connection on
//     goroutines of its own that wait in Go's netpoller, copying with
//     package splice.
//
// # Several routes on one address
//
// Stream routes may share a listen address when [Route.SNI] and
// [Route.ALPN] tell them apart: the relay reads the client's TLS
// ClientHello (after a PROXY header, if the address takes one) without
// terminating TLS, picks the most specific route (an exact name over a
// wildcard, a longer wildcard over a shorter, a route with ALPN over one
// without), and writes the bytes it read to that route's target before
// relaying. The route with neither is the default for clients that send
// no hello, no name, or one nothing matches. The hello is bounded (16 KiB)
// and timed ([Route.PeekTimeout]); clients turned away before a route is
// chosen are counted in [Stats].Fronts.
//
// UDP routes share an address the same way, by the ClientHello of a QUIC
// client (versions 1 and 2): the relay decrypts its Initial packets with
// the keys every Initial is protected with and reassembles the hello from
// their CRYPTO frames, holding the client's first datagrams (at most 4
// and 8 KiB a client, 1024 clients an address, 2 s) until it is whole,
// then forwards them all, unchanged and in order, to the route it chose.
// A datagram is first looked up among the sessions of every route of the
// address, so an established client is never parsed again. A client
// without a readable hello goes to the default route, or is dropped
// without one; [FrontStats].UDP counts them by reason.
//
// # Datagrams
//
// A UDP route keeps a session per client address, each with its own
// upstream socket, and answers from the address the client sent to.
// Sessions end after [Route.SessionTimeout] (default 60 s) without traffic;
// [Route.MaxSessions] bounds them, and datagrams over the limit are
// dropped and counted. With [Route.Workers] above 1 the route reads from
// that many sockets in one SO_REUSEPORT group, one goroutine each; the
// kernel hashes every client to one socket, and its replies leave from it.
// A target given by host name is looked up again every 30 s, in the
// background, for the sessions that open after; a session keeps the
// address it started with. When a route stops (a reload that removes or
// rebinds it, or a shutdown), the datagrams already queued on its sockets
// are relayed before they close; none that had arrived is dropped.
//
// # Operations
//
// [Server.Start] binds every route, failing as a whole if one address is
// in use. [Server.Update] applies a new Config (SIGHUP in zeroio relay),
// all or nothing: added routes start, removed ones stop listening,
// established connections are never touched, and a stream reload loses
// no client; if any route cannot start, nothing changes. [Server.Shutdown] stops accepting, lets
// relays in flight finish until its context ends, then closes them.
// [Server.Stats] returns plain counters that cmd/zeroio exports to
// Prometheus.
//
// [Server.Inherit], before Start, gives the Server sockets to use
// instead of binding (systemd's socket activation): each route takes
// those named after it or bound to its address, and Start refuses any
// that no route takes. At run time, [Server.SetTargetState] drains or
// disables a target and [Server.SetTargetWeight] reweighs it until the
// next Update; [Server.Streams] lists the stream connections in flight,
// a page at a time, and [Server.CloseStream] closes one. The package starts no goroutine beyond serving: with the
// event engine, one per event loop and one per listener (which waits
// while the loops accept); with the goroutine engine, one per listener
// and one or two per relayed connection.
//
// # Binary upgrades
//
// [Server.HandOver] hands a running server to another process over a
// Unix socket (its descriptors pass as SCM_RIGHTS), and [TakeOver]
// starts a server there from what it sends: the listening sockets and
// the clients queued on them, the event engine's every stream (bytes in
// its buffers and splice pipes included) and the UDP sessions. It is all
// or nothing: until the receiver has taken everything, the sender keeps
// serving, and any failure leaves it as it was. The goroutine engine
// hands its listeners over and drains its streams itself.
//
// # Platforms
//
// Linux is the fast path. On other GOOS the relay works with the same
// API, but [Route.Workers] above 1 is refused (SO_REUSEPORT balancing is
// Linux's).
package relay
