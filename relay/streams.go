package relay

import (
	"errors"
	"net/netip"
	"slices"
	"time"
)

// Listing and closing the stream connections in flight, at run time, on
// every engine: each engine collects its streams where they live (the
// goroutine engine from its registry, the event engine in its loops) and
// describes each with stream.info.

// StreamInfo describes a stream connection in flight ([Server.Streams]).
type StreamInfo struct {
	// ID names the stream for [Server.CloseStream]: unique in the
	// Server's life, growing in the order clients were accepted.
	ID uint64
	// Route is the route that took the client; "" while the client's
	// hello is still to choose it.
	Route string
	// Client is the client's address (its PROXY header's, once read);
	// not valid for a client of a Unix socket.
	Client netip.AddrPort
	// Target is the URL of the target the stream is dialling or
	// relaying to; "" before the dial.
	Target string
	// State is "hello" (reading the ClientHello that chooses the
	// route), "connecting" (the PROXY header, the policy, waiting for a
	// slot, the dial) or "relaying".
	State string
	// BytesUp (client to target) and BytesDown count what the relay has
	// moved so far.
	BytesUp, BytesDown uint64
	// Age is how long ago the client was accepted.
	Age time.Duration
}

// errAdminClose ends a stream that Server.CloseStream closed.
var errAdminClose = errors.New("relay: closed at run time")

// newStreamID returns the ID of a stream just accepted.
func (s *Server) newStreamID() uint64 { return s.streamSeq.Add(1) }

// info describes st at now (mono), with the bytes relayed each way.
func (st *stream) info(up, down uint64, now int64) StreamInfo {
	si := StreamInfo{ID: st.id, Client: st.src, BytesUp: up, BytesDown: down, Age: time.Duration(now - st.start), State: "connecting"}
	switch {
	case st.rt != nil:
		si.Route = st.rt.name
	case st.front != nil:
		si.State = "hello"
	}
	if st.b != nil {
		si.Target = st.b.name
	}
	if st.relaying {
		si.State = "relaying"
	}
	return si
}

// firstStreams sorts ss by ID and keeps the first limit (all if limit
// is 0 or less).
func firstStreams(ss []StreamInfo, limit int) []StreamInfo {
	slices.SortFunc(ss, func(a, b StreamInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	if limit > 0 && len(ss) > limit {
		ss = ss[:limit:limit]
	}
	return ss
}

// Streams returns the stream connections in flight whose ID is above
// after, by ID, at most limit of them (all if limit is 0 or less): a
// page, the next one starting after the last ID of this one. UDP
// sessions are not streams.
func (s *Server) Streams(after uint64, limit int) []StreamInfo {
	return firstStreams(s.eng.streams(after, limit, mono()), limit)
}

// CloseStream closes the stream connection id, as Shutdown's deadline
// would: both sides, or the client and a dial in progress. The
// connection log says `end="closed"`. It reports whether there was such
// a stream.
func (s *Server) CloseStream(id uint64) bool {
	if !s.eng.closeStream(id) {
		return false
	}
	s.log.Info("stream closed", "id", id)
	return true
}
