// Package dnstest runs a DNS server on loopback for tests: UDP and TCP
// on one port, answering from a function the test can change.
package dnstest

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/dnsmsg"
)

// Answer is what the server replies to one question.
type Answer struct {
	RCode                         int
	Answer, Authority, Additional []dnsmsg.Record
	// Drop sends nothing: the server looks dead.
	Drop bool
	// Truncate answers over UDP with no record and TC set, so that the
	// client asks again over TCP.
	Truncate bool
}

// Handler answers a question.
type Handler func(name string, qtype uint16) Answer

// Server is a DNS server on 127.0.0.1.
type Server struct {
	Addr    netip.AddrPort
	udp     *net.UDPConn
	tcp     *net.TCPListener
	handler atomic.Pointer[Handler]
	// Queries counts the questions received, over UDP and TCP.
	Queries, TCPQueries atomic.Int64
	wg                  sync.WaitGroup
}

// Start runs a server answering with h until Close.
func Start(h Handler) (*Server, error) {
	var s *Server
	var err error
	// The UDP port's TCP twin may be taken: try another.
	for range 20 {
		if s, err = listen(); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	s.SetHandler(h)
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	return s, nil
}

// listen binds a UDP socket and a TCP listener on one loopback port.
func listen() (*Server, error) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s := &Server{udp: u, Addr: u.LocalAddr().(*net.UDPAddr).AddrPort()}
	s.tcp, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(s.Addr))
	if err != nil {
		u.Close()
		return nil, err
	}
	return s, nil
}

// SetHandler changes the answers from now on.
func (s *Server) SetHandler(h Handler) { s.handler.Store(&h) }

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if out := s.reply(buf[:n], true); out != nil {
			s.udp.WriteToUDPAddrPort(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			var l [2]byte
			for {
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				s.TCPQueries.Add(1)
				out := s.reply(q, false)
				if out == nil {
					return
				}
				c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out))))
				c.Write(out)
			}
		}()
	}
}

// reply builds the response to the query q, or nil to send none.
func (s *Server) reply(q []byte, udp bool) []byte {
	m, err := dnsmsg.Parse(q)
	if err != nil || m.QType == 0 {
		return nil
	}
	s.Queries.Add(1)
	a := (*s.handler.Load())(m.QName, m.QType)
	if a.Drop {
		return nil
	}
	h := dnsmsg.Header{ID: m.ID, RCode: a.RCode, QName: m.QName, QType: m.QType, Authoritative: true}
	if a.Truncate && udp {
		h.Truncated = true
		out, _ := dnsmsg.AppendResponse(nil, h, nil, nil, nil)
		return out
	}
	out, err := dnsmsg.AppendResponse(nil, h, a.Answer, a.Authority, a.Additional)
	if err != nil {
		h.RCode = dnsmsg.RCodeServFail
		out, _ = dnsmsg.AppendResponse(nil, h, nil, nil, nil)
	}
	return out
}
