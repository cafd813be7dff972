// Package interop holds tests of zeroio with third-party code: x/net's
// conformance tests and batch readers over zeroio's sockets and relay.
package interop
