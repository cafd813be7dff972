package relay

import (
	"io"
	"sync"
)

// copyStream moves src to dst until EOF (nil error) or an error, calling
// progress after each chunk reaches dst. It is the one place the relay
// moves bytes.
//
// TODO(issue 5): splice.Copier once package splice lands.
func copyStream(dst io.Writer, src io.Reader, progress func(int64)) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var total int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			progress(int64(w))
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}
