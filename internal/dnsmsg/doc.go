// Package dnsmsg builds DNS queries and parses their responses (RFC 1035,
// RFC 2782 for SRV, RFC 6891 for the EDNS(0) OPT record), and asks a DNS
// server over UDP, then TCP when the answer is truncated. It reads only
// what the relay's target discovery needs: A, AAAA, CNAME, SRV and SOA
// records with their TTLs, which package net's resolver does not give.
//
// Messages come from the network: [Parse] checks every length and
// pointer against the message and returns an error for anything that
// does not fit; it never panics.
package dnsmsg
