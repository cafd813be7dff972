//go:build !unix

package relay

import "os"

// fileOwner reports no owner: files have none Route.UnixUser can set here.
func fileOwner(fi os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
