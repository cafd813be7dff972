package splice

import (
	"errors"
	"io"

	"github.com/zeroio/zeroio/pool"
)

// errInvalidWrite means that a Write returned an impossible count, as in
// io.Copy.
var errInvalidWrite = errors.New("splice: invalid write result")

// getBuf borrows the buffered path's buffer from [pool].
func getBuf() []byte {
	add(cBuffersBorrowed, 1)
	add(cBuffersInUse, 1)
	return pool.Get(bufSize)
}

// putBuf gives a buffer from getBuf back.
func putBuf(b []byte) {
	add(cBuffersInUse, ^uint64(0))
	pool.Put(b)
}

// writeChunk writes b to dst as io.Copy does and reports to progress. It
// returns how many bytes reached dst.
func writeChunk(dst io.Writer, b []byte, progress func(int64)) (int, error) {
	nw, ew := dst.Write(b)
	if nw < 0 || nw > len(b) {
		nw = 0
		if ew == nil {
			ew = errInvalidWrite
		}
	}
	if nw > 0 && progress != nil {
		progress(int64(nw))
	}
	if ew == nil && nw != len(b) {
		ew = io.ErrShortWrite
	}
	return nw, ew
}

// copyBuffer copies with src.Read and dst.Write through a pooled buffer,
// for a src without a file descriptor. The buffer is held for the whole
// copy, including while src.Read blocks: a generic reader gives no way to
// wait for data without a buffer.
func copyBuffer(dst io.Writer, src io.Reader, remain int64, progress func(int64), t *tally) (written int64, err error) {
	buf := getBuf()
	defer putBuf(buf)
	for remain > 0 {
		b := buf
		if int64(len(b)) > remain {
			b = b[:remain]
		}
		nr, er := src.Read(b)
		if nr < 0 || nr > len(b) {
			return written, errors.New("splice: invalid read result")
		}
		if nr > 0 {
			nw, ew := writeChunk(dst, b[:nr], progress)
			written += int64(nw)
			remain -= int64(nw)
			t.moved(pathBuffer, nw)
			if ew != nil {
				return written, ew
			}
		}
		if er != nil {
			if er == io.EOF {
				er = nil
			}
			return written, er
		}
	}
	return written, nil
}
