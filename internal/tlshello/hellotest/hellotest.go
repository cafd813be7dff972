// Package hellotest builds TLS ClientHello records by hand for the tests
// of the packages that parse them: crypto/tls will not write a server name
// of arbitrary bytes, which those tests need.
package hellotest

// Build makes a minimal ClientHello record (RFC 8446, 4.1.2) with a
// server_name extension holding name (none if name is empty) and an ALPN
// extension listing alpn (none if it is empty). The name may be any bytes.
func Build(name string, alpn []string) []byte {
	u16 := func(b []byte, n int) []byte { return append(b, byte(n>>8), byte(n)) }
	var ext []byte
	if name != "" {
		ext = u16(ext, 0)
		ext = u16(ext, len(name)+5)
		ext = u16(ext, len(name)+3)
		ext = append(ext, 0)
		ext = u16(ext, len(name))
		ext = append(ext, name...)
	}
	if len(alpn) > 0 {
		var list []byte
		for _, p := range alpn {
			list = append(append(list, byte(len(p))), p...)
		}
		ext = u16(ext, 16)
		ext = u16(ext, len(list)+2)
		ext = u16(ext, len(list))
		ext = append(ext, list...)
	}
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)
	body = append(body, 0)                // session id
	body = append(body, 0, 2, 0x13, 0x01) // one suite
	body = append(body, 1, 0)             // null compression
	body = u16(body, len(ext))
	body = append(body, ext...)
	msg := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{22, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}
