package quichello

import "encoding/binary"

// SealInitial builds a client's protected Initial packet of version 1 or
// 2, sent to dcid from scid with packet number pn, carrying the frames
// in payload, padded with PADDING frames to at least padTo bytes. It is
// what a QUIC client's first flight looks like to a relay, for tests and
// tools: the relay itself never writes a packet.
func SealInitial(version uint32, dcid, scid []byte, pn uint32, payload []byte, padTo int) ([]byte, error) {
	k, err := initialKeys(version, dcid, true)
	if err != nil {
		return nil, err
	}
	typeBits := byte(0)
	if version == Version2 {
		typeBits = 1
	}
	const pnLen = 2
	hdr := []byte{0xc0 | typeBits<<4 | (pnLen - 1)}
	hdr = binary.BigEndian.AppendUint32(hdr, version)
	hdr = append(hdr, byte(len(dcid)))
	hdr = append(hdr, dcid...)
	hdr = append(hdr, byte(len(scid)))
	hdr = append(hdr, scid...)
	hdr = append(hdr, 0) // no token
	payload = append([]byte(nil), payload...)
	body := len(payload) + tagLen
	if n := padTo - (len(hdr) + 2 + pnLen + body); n > 0 {
		payload = append(payload, make([]byte, n)...)
		body += n
	}
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(pnLen+body)|0x4000)
	pnOff := len(hdr)
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(pn))
	nonce := k.iv
	var pnb [8]byte
	binary.BigEndian.PutUint64(pnb[:], uint64(pn))
	for i := range pnb {
		nonce[4+i] ^= pnb[i]
	}
	pkt := k.aead.Seal(hdr, nonce[:], payload, hdr)
	var mask [16]byte
	k.hp.Encrypt(mask[:], pkt[pnOff+4:pnOff+4+sampleLen])
	pkt[0] ^= mask[0] & 0x0f
	for i := range pnLen {
		pkt[pnOff+i] ^= mask[1+i]
	}
	return pkt, nil
}

// AppendCrypto appends a CRYPTO frame carrying data at offset off of the
// CRYPTO stream.
func AppendCrypto(b []byte, off int, data []byte) []byte {
	b = append(b, frameCrypto)
	b = appendVarint(b, uint64(off))
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}

func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return binary.BigEndian.AppendUint16(b, uint16(v)|0x4000)
	case v < 1<<30:
		return binary.BigEndian.AppendUint32(b, uint32(v)|0x80000000)
	}
	return binary.BigEndian.AppendUint64(b, v|0xc0<<56)
}
