//go:build !linux

package relay

// waitReadable returns at once on GOOS other than linux: the session then
// blocks in ReadBatch holding its reply buffers while idle.
func (s *session) waitReadable() error { return nil }
