package udp

// groBufSize is the buffer a GRO read needs: the kernel may hand one
// coalesced read of up to 64 KiB (the largest IP packet it builds), and a
// smaller buffer would truncate it, losing every datagram past the end.
const groBufSize = 1 << 16

// splitGRO delivers the datagrams coalesced in data (each seg bytes, the
// last possibly shorter; seg <= 0 or seg >= len(data) means data is one
// datagram) into msgs, one datagram per message, copying each into the
// message's Buf and giving it the metadata of meta (Addr, Local, IfIndex,
// TOS, Flags). A datagram larger than its Buf is cut to fit and marked
// Truncated. It returns the number of messages filled and of bytes of data
// consumed: when msgs runs out, data[consumed:] is still undelivered. It is
// a pure function so that it can be tested and fuzzed on any GOOS.
func splitGRO(msgs []Message, data []byte, seg int, meta *Message) (filled, consumed int) {
	if seg <= 0 || seg > len(data) {
		seg = len(data)
	}
	for filled < len(msgs) && (consumed < len(data) || (len(data) == 0 && filled == 0)) {
		end := min(consumed+seg, len(data))
		d := data[consumed:end]
		m := &msgs[filled]
		m.N = copy(m.Buf, d)
		m.Truncated = m.N < len(d)
		m.Addr, m.Local, m.IfIndex, m.TOS, m.Flags = meta.Addr, meta.Local, meta.IfIndex, meta.TOS, meta.Flags
		m.NOOB = 0
		filled++
		consumed = end
		if len(data) == 0 {
			break
		}
	}
	return filled, consumed
}
