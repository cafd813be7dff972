//go:build !linux

package relay

func migrateReq() bool { return false }
