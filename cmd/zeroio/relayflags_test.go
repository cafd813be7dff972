package main

import (
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
)

// TestResolve: a setting is the flag's when the flag was given, else the
// file's when it sets one, else the flag's default, and a reload that
// reads a file without the setting goes back to the default, not to
// what the previous file said.
func TestResolve(t *testing.T) {
	f := newRelayFlags()
	if err := f.parse([]string{"--log-level", "warn", "--max-conns", "7", "-c", "x.yaml"}); err != nil {
		t.Fatal(err)
	}
	fc := fileConfig{MaxConns: 100, LogLevel: "error", LogFormat: "json", Engine: "goroutine", ShutdownTimeout: time.Second, Metrics: "127.0.0.1:9100",
		Resolver: "127.0.0.1:5353", DNSMinTTL: 2 * time.Second}
	got := f.resolve(&fc)
	want := settings{maxConns: 7, engine: "goroutine", shutdownTimeout: time.Second, logLevel: "warn", logFormat: "json", connLog: "debug", metrics: "127.0.0.1:9100",
		resolver: "127.0.0.1:5353", dnsMinTTL: 2 * time.Second, dnsMaxTTL: relay.DefaultDNSMaxTTL}
	if got != want {
		t.Errorf("with the file: %+v, want %+v", got, want)
	}
	want = settings{maxConns: 7, shutdownTimeout: defaultShutdownTimeout, logLevel: "warn", logFormat: "text", connLog: "debug",
		dnsMinTTL: relay.DefaultDNSMinTTL, dnsMaxTTL: relay.DefaultDNSMaxTTL}
	if got := f.resolve(&fileConfig{}); got != want {
		t.Errorf("with a file that sets nothing: %+v, want %+v", got, want)
	}
	if got := f.resolve(nil); got != want {
		t.Errorf("without a file: %+v, want %+v", got, want)
	}
}
