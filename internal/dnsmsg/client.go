package dnsmsg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"
)

// DefaultTimeout bounds one query to one server when [Client.Timeout] is
// 0, as resolv.conf's default "timeout:5" does.
const DefaultTimeout = 5 * time.Second

// Client asks DNS servers. The zero value asks the servers of
// /etc/resolv.conf (read again when the file changes).
type Client struct {
	// Servers are asked in turn until one answers; empty: the
	// nameservers of /etc/resolv.conf.
	Servers []netip.AddrPort
	// Timeout bounds each query to one server, over UDP and then TCP;
	// 0 is DefaultTimeout.
	Timeout time.Duration

	conf resolvConf
}

// Result is the answer to one question.
type Result struct {
	// Records answer the question, CNAMEs followed; empty when the name
	// has none of the type (NotFound tells whether it exists at all).
	Records []Record
	// TTL is how long the answer may be kept: the smallest TTL of the
	// records and CNAMEs it took, or for an empty answer the negative
	// TTL its SOA record gives (0 if none).
	TTL      uint32
	NotFound bool // NXDOMAIN: the name does not exist
	// Msg is the whole response, for its additional section.
	Msg *Message
}

// ServerError is a server's failure to answer: a timeout, a network
// error, SERVFAIL or REFUSED, or a malformed response.
type ServerError struct {
	Server netip.AddrPort
	Err    error
}

func (e *ServerError) Error() string { return fmt.Sprintf("dns server %s: %v", e.Server, e.Err) }
func (e *ServerError) Unwrap() error { return e.Err }

var errNoServers = errors.New("dnsmsg: no DNS server to ask")

// Lookup asks for the records of type qtype of the fully qualified name,
// from each server in turn until one answers (a negative answer is an
// answer). The error is the last server's, when none answered.
func (c *Client) Lookup(ctx context.Context, name string, qtype uint16) (*Result, error) {
	servers := c.Servers
	if len(servers) == 0 {
		servers = c.conf.servers()
	}
	if len(servers) == 0 {
		return nil, errNoServers
	}
	if _, err := AppendQuery(nil, 0, name, qtype); err != nil {
		return nil, fmt.Errorf("%q: %w", name, err)
	}
	var err error
	for _, s := range servers {
		var m *Message
		m, err = c.exchange(ctx, s, name, qtype)
		if err == nil {
			return result(m, name, qtype), nil
		}
		err = &ServerError{Server: s, Err: err}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// result reads the answer to the question from m.
func result(m *Message, name string, qtype uint16) *Result {
	r := &Result{Msg: m, NotFound: m.RCode == RCodeNXDomain}
	if !r.NotFound {
		r.Records, r.TTL = m.Records(name, qtype)
	}
	if len(r.Records) == 0 {
		r.TTL, _ = m.NegativeTTL()
	}
	return r
}

// exchange asks server one question over UDP, and again over TCP when
// the answer comes truncated, each within the client's timeout.
func (c *Client) exchange(ctx context.Context, server netip.AddrPort, name string, qtype uint16) (*Message, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	for _, network := range []string{"udp", "tcp"} {
		actx, cancel := context.WithTimeout(ctx, timeout)
		m, err := exchangeOver(actx, network, server, name, qtype)
		cancel()
		if err != nil {
			return nil, err
		}
		if m.Truncated && network == "udp" {
			continue
		}
		switch m.RCode {
		case RCodeSuccess, RCodeNXDomain:
			return m, nil
		default:
			return nil, fmt.Errorf("response code %d", m.RCode)
		}
	}
	return nil, errors.New("answer truncated over TCP")
}

// exchangeOver sends the question over network and reads the response
// that matches it (its ID and question); over UDP, datagrams that do not
// match are ignored, as a spoofed or late answer would be.
func exchangeOver(ctx context.Context, network string, server netip.AddrPort, name string, qtype uint16) (*Message, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	id := uint16(rand.Uint32())
	q, err := AppendQuery(make([]byte, 2, 512), id, name, qtype)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		binary.BigEndian.PutUint16(q, uint16(len(q)-2))
		if _, err := conn.Write(q); err != nil {
			return nil, err
		}
		m, err := readTCP(conn)
		if err == nil && !matches(m, id, name, qtype) {
			err = errors.New("response does not match the question")
		}
		return m, err
	}
	if _, err := conn.Write(q[2:]); err != nil {
		return nil, err
	}
	buf := make([]byte, UDPSize)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		if m, err := Parse(buf[:n]); err == nil && matches(m, id, name, qtype) {
			return m, nil
		}
	}
}

// readTCP reads one length-prefixed message (RFC 1035 section 4.2.2).
func readTCP(r io.Reader) (*Message, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return Parse(b)
}

// matches reports whether m answers the query id for name and qtype.
func matches(m *Message, id uint16, name string, qtype uint16) bool {
	return m.Response && m.ID == id && m.QType == qtype && m.QName == CanonicalName(name)
}
