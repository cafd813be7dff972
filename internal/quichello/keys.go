package quichello

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
)

// Initial salts (RFC 9001, 5.2; RFC 9369, 3.3.1).
var (
	saltV1 = []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}
	saltV2 = []byte{0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9}
)

// keys open one direction's Initial packets: AEAD_AES_128_GCM and AES
// header protection, the only suite Initial packets use (RFC 9001, 5.2).
type keys struct {
	aead cipher.AEAD
	hp   cipher.Block
	iv   [12]byte
}

// initialKeys derives the keys of the client's (client) or the server's
// Initial packets of a connection whose client chose dcid as the first
// destination connection ID.
func initialKeys(version uint32, dcid []byte, client bool) (*keys, error) {
	salt, prefix := saltV1, "quic "
	if version == Version2 {
		salt, prefix = saltV2, "quicv2 "
	}
	initial, err := hkdf.Extract(sha256.New, dcid, salt)
	if err != nil {
		return nil, err
	}
	side := "server in"
	if client {
		side = "client in"
	}
	secret, err := expandLabel(initial, side, sha256.Size)
	if err != nil {
		return nil, err
	}
	key, err := expandLabel(secret, prefix+"key", 16)
	if err != nil {
		return nil, err
	}
	iv, err := expandLabel(secret, prefix+"iv", 12)
	if err != nil {
		return nil, err
	}
	hpKey, err := expandLabel(secret, prefix+"hp", 16)
	if err != nil {
		return nil, err
	}
	k := new(keys)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if k.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	if k.hp, err = aes.NewCipher(hpKey); err != nil {
		return nil, err
	}
	copy(k.iv[:], iv)
	return k, nil
}

// expandLabel is TLS 1.3's HKDF-Expand-Label with an empty context
// (RFC 8446, 7.1), over SHA-256.
func expandLabel(secret []byte, label string, n int) ([]byte, error) {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	return hkdf.Expand(sha256.New, secret, string(info), n)
}

// tagLen is AEAD_AES_128_GCM's tag; sampleLen the header protection
// sample (RFC 9001, 5.4.2).
const (
	tagLen    = 16
	sampleLen = 16
)

// open removes header protection from the long-header packet pkt (parsed
// as h) and decrypts it into scratch, which it may grow. largest is the
// largest packet number opened so far in this space (-1 for none), to
// recover the full packet number (RFC 9000, A.3). It returns the
// plaintext payload (in scratch) and the packet number.
func (k *keys) open(scratch []byte, pkt []byte, h *LongHeader, largest int64) ([]byte, []byte, int64, error) {
	so := h.PNOffset + 4
	if so+sampleLen > h.Len {
		return scratch, nil, 0, ErrMalformed
	}
	var mask [16]byte
	k.hp.Encrypt(mask[:], pkt[so:so+sampleLen])
	first := pkt[0] ^ mask[0]&0x0f
	pnLen := int(first&3) + 1
	hdrLen := h.PNOffset + pnLen
	if h.Len-hdrLen < tagLen {
		return scratch, nil, 0, ErrMalformed
	}
	if cap(scratch) < h.Len {
		scratch = make([]byte, 0, h.Len)
	}
	hdr := append(scratch[:0], pkt[:hdrLen]...)
	hdr[0] = first
	var trunc uint64
	for i := range pnLen {
		hdr[h.PNOffset+i] ^= mask[1+i]
		trunc = trunc<<8 | uint64(hdr[h.PNOffset+i])
	}
	pn := decodePN(largest, trunc, pnLen*8)
	nonce := k.iv
	var pnb [8]byte
	binary.BigEndian.PutUint64(pnb[:], uint64(pn))
	for i := range pnb {
		nonce[4+i] ^= pnb[i]
	}
	plain, err := k.aead.Open(scratch[hdrLen:hdrLen], nonce[:], pkt[hdrLen:h.Len], hdr)
	if err != nil {
		return scratch, nil, 0, ErrDecrypt
	}
	if first&0x0c != 0 { // reserved bits, checked once protection is off (RFC 9000, 17.2)
		return scratch, nil, 0, ErrMalformed
	}
	return scratch, plain, pn, nil
}

// decodePN recovers a packet number from its truncated bits
// (RFC 9000, A.3).
func decodePN(largest int64, trunc uint64, bits int) int64 {
	expected := largest + 1
	win := int64(1) << bits
	half := win / 2
	candidate := expected&^(win-1) | int64(trunc)
	switch {
	case candidate <= expected-half && candidate < 1<<62-win:
		return candidate + win
	case candidate > expected+half && candidate >= win:
		return candidate - win
	}
	return candidate
}
