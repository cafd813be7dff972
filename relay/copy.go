package relay

import (
	"io"

	"github.com/zeroio/zeroio/splice"
)

// copyStream moves src to dst until EOF (nil error) or an error, calling
// progress after each chunk reaches dst. It is the one place the relay
// moves bytes: splice(2) through a pooled pipe on Linux for TCP and Unix
// sockets, a pooled buffer elsewhere. A copy waiting on an idle src holds
// neither pipe nor buffer (package splice's contract).
func copyStream(dst io.Writer, src io.Reader, progress func(int64)) (int64, error) {
	c := splice.Copier{Progress: progress, PipeSize: pipeSize}
	return c.Copy(dst, src)
}

// pipeSize is the pipe capacity requested per copy in flight. 256 KiB
// keeps the loopback path near its peak while 1,000 busy relays (2,000
// copies) stay within the default pipe-user-pages-soft budget of an
// unprivileged user (pipe(7): 16,384 pages, 64 MiB).
const pipeSize = 256 << 10
