package splice

import (
	"os"

	"golang.org/x/sys/unix"
)

// maxSendfile bounds one sendfile(2) or copy_file_range(2) call so that
// Progress hears about a long file copy as it goes.
const maxSendfile = 16 << 20

// fileCopy moves bytes from a regular file with sendfile(2) (to any
// descriptor) or copy_file_range(2) (to a regular file, where it can
// share extents or copy inside the kernel). Both read at and advance
// src's file offset, and write at dst's, as Read and Write would.
func (j *job) fileCopy(p path) (handled bool, err error) {
	j.op = p
	name := "sendfile"
	if p == pathCopyFileRange {
		name = "copy_file_range"
	}
	for j.remain > 0 {
		j.n, j.errno, j.ctlErr = 0, nil, nil
		err := rawWrite(j.dst, j.fileOuterFn)
		if j.ctlErr != nil {
			return true, opError(j.src, "read", j.ctlErr)
		}
		if err != nil {
			return true, opError(j.dst, "write", err)
		}
		if j.errno != nil {
			if j.written == 0 && (notSupported(j.errno) ||
				// copy_file_range: EIO on CIFS (go.dev/issue/42334),
				// EPERM in some containers (go.dev/issue/40893).
				p == pathCopyFileRange && (j.errno == unix.EIO || j.errno == unix.EPERM) ||
				// EBADF: an end not open for what the call needs
				// (src write-only; dst O_APPEND, which
				// copy_file_range refuses and write(2) takes). The
				// next paths find out which end it was, so the
				// error names that end, as its own Read or Write
				// would.
				j.errno == unix.EBADF && !j.dstRO) {
				return false, nil
			}
			return true, opError(j.dst, "write", os.NewSyscallError(name, j.errno))
		}
		if j.n == 0 {
			// EOF. Before Linux 5.19 copy_file_range could also report
			// 0 bytes for files it cannot copy (procfs, sysfs); then
			// let sendfile decide, as internal/poll does.
			return p == pathSendfile || j.written != 0, nil
		}
		j.advance(p, j.n)
	}
	return true, nil
}

// fileOuter runs under dst's write lock and reaches src inside it, so
// that while dst is full the copy waits holding nothing of src (closing
// src does not have to wait for dst to drain).
func (j *job) fileOuter(fd uintptr) bool {
	j.dfd = fd
	if err := rawControl(j.src, j.fileInnerFn); err != nil {
		j.ctlErr = err
		return true
	}
	if j.errno == unix.EAGAIN {
		j.errno = nil
		return false
	}
	return true
}

func (j *job) fileInner(fd uintptr) {
	for {
		var n int
		var err error
		if j.op == pathCopyFileRange {
			n, err = unix.CopyFileRange(int(fd), nil, int(j.dfd), nil, int(min(j.remain, maxSendfile)), 0)
		} else {
			n, err = unix.Sendfile(int(j.dfd), int(fd), nil, int(min(j.remain, maxSendfile)))
		}
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			j.n = n
		}
		if err == unix.EBADF {
			fl, ferr := unix.FcntlInt(j.dfd, unix.F_GETFL, 0)
			j.dstRO = ferr == nil && fl&unix.O_ACCMODE == unix.O_RDONLY
		}
		j.errno = err
		return
	}
}
