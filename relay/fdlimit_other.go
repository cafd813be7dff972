//go:build !unix

package relay

// descriptorLimit returns 0: no descriptor limit is known on this
// platform, so only Config.MaxConns bounds the relays.
func descriptorLimit() int64 { return 0 }
