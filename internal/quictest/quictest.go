// Package quictest gives tests what a QUIC client's first flight carries:
// a real ClientHello from crypto/tls, as a QUIC client puts it in the
// CRYPTO stream of its Initial packets (quichello.SealInitial protects
// them). Only tests import it.
package quictest

import (
	"context"
	"crypto/tls"
	"errors"
)

// ClientHello returns the ClientHello crypto/tls's QUIC client sends for
// name, offering alpn.
func ClientHello(name string, alpn ...string) ([]byte, error) {
	c := tls.QUICClient(&tls.QUICConfig{TLSConfig: &tls.Config{ServerName: name, NextProtos: alpn, MinVersion: tls.VersionTLS13}})
	c.SetTransportParameters([]byte{0x04, 0x04, 0x80, 0x10, 0x00, 0x00})
	if err := c.Start(context.Background()); err != nil {
		return nil, err
	}
	defer c.Close()
	var hello []byte
	for ev := c.NextEvent(); ev.Kind != tls.QUICNoEvent; ev = c.NextEvent() {
		if ev.Kind == tls.QUICWriteData && ev.Level == tls.QUICEncryptionLevelInitial {
			hello = append(hello, ev.Data...)
		}
	}
	if len(hello) == 0 {
		return nil, errors.New("quictest: no ClientHello from crypto/tls")
	}
	return hello, nil
}
