//go:build !linux

package splice

import "io"

// copy moves every byte through a pooled buffer: on GOOS other than linux
// there is no splice(2), so every copy takes the buffered path.
func (c *Copier) copy(dst io.Writer, src io.Reader, remain int64) (int64, error) {
	var t tally
	n, err := copyBuffer(dst, src, remain, c.Progress, &t)
	t.flush()
	return n, err
}
