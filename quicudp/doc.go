// Package quicudp runs quic-go over a zeroio [udp.Conn]: quic-go reads
// through zeroio's batch reader, with GRO, and the connection IDs it
// issues can carry a server ID that a load balancer (zeroio relay among
// them) routes by, whatever address a client's packets come from.
//
// # Reading with GRO
//
// quic-go reads a *net.UDPConn, or anything with its methods, through
// x/net's ipv4.PacketConn.ReadBatch on the raw socket. A *udp.Conn handed
// to quic-go as it is works that way too, but handing the socket out
// turns GRO off (see package udp). quic-go first asks its connection
// whether it has a ReadBatch of x/net's shape; [Conn] has one, which
// calls [udp.Conn.ReadBatch], so the kernel may coalesce the datagrams
// quic-go receives (GRO) and zeroio splits them. quic-go sends as it
// always does, with GSO where the kernel has it. [Conn.SyscallConn] gives
// quic-go what it needs the descriptor for, socket options, without
// handing the socket out:
//
//	c, err := udp.Listen("udp", ":443", nil)
//	...
//	tr := &quic.Transport{Conn: quicudp.New(c)}
//
// # Connection IDs a load balancer can route
//
// QUIC connections outlive addresses: a client behind a NAT that rebinds
// its port, or one that migrates to another network, keeps its
// connection, and a load balancer that hashes addresses sends its packets
// to a server that does not know it. [CIDGenerator] is a
// quic.ConnectionIDGenerator whose connection IDs carry the server's ID in
// the clear, laid out as the QUIC-LB draft's unencrypted mode has it
// (draft-ietf-quic-load-balancers): the first octet holds the config
// rotation bits and the ID's length, then the server ID, then a random
// nonce. A load balancer that knows the layout reads the server ID from
// any packet's destination connection ID ([ServerID] decodes it):
//
//	gen, err := quicudp.NewCIDGenerator(quicudp.LBConfig{ServerID: []byte{7}, NonceLen: 8})
//	...
//	tr := &quic.Transport{Conn: quicudp.New(c), ConnectionIDGenerator: gen}
//
// The server ID is visible to anyone who sees the packets; the nonce
// keeps two IDs of one server from being linked to each other, but not
// to the server. The draft's encrypted modes hide it; this package does
// not implement them.
package quicudp
