package splice

import (
	"bytes"
	"math"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// stepNames name the steps in test output and in the tables below.
var stepNames = [nSteps]string{
	stepClassifySrc:   "stat-src",
	stepClassifyDst:   "stat-dst",
	stepSplice:        "splice",
	stepSendfile:      "sendfile",
	stepCopyFileRange: "copy_file_range",
	stepRead:          "read",
	stepCopy:          "copy",
}

// fakeEnd is an end as the kernel would classify it: its type, and the
// kind and size an fstat(2) would find.
type fakeEnd struct {
	typ  endType
	kind kind
	size int64
}

// drive runs choose as job.run does, answering classifications from the
// fake ends and refusing the kernel paths in refuse, and returns the steps
// taken, whether the copy counted a fallback, and the last action.
func drive(t *testing.T, limit int64, src, dst fakeEnd, refuse ...step) (trace string, fellBack bool, last action) {
	t.Helper()
	c := choice{limit: limit, src: newEnd(src.typ), dst: newEnd(dst.typ)}
	var names []string
	for range 20 {
		a := choose(c)
		names = append(names, stepNames[a.step])
		switch a.step {
		case stepClassifySrc:
			if c.src.known {
				t.Fatalf("%s: classifies src twice", strings.Join(names, " "))
			}
			c.src = end{typ: src.typ, known: true, kind: src.kind, size: src.size}
			continue
		case stepClassifyDst:
			if c.dst.known {
				t.Fatalf("%s: classifies dst twice", strings.Join(names, " "))
			}
			c.dst = end{typ: dst.typ, known: true, kind: dst.kind, size: dst.size}
			continue
		case stepRead, stepCopy:
			return strings.Join(names, " "), fellBack || a.fellBack, a
		}
		fellBack = fellBack || a.fellBack
		refused := false
		for _, r := range refuse {
			refused = refused || r == a.step
		}
		if !refused {
			return strings.Join(names, " "), fellBack, a
		}
		if c.tried.has(a.step) {
			t.Fatalf("%s: tries a refused path again", strings.Join(names, " "))
		}
		c.tried.add(a.step)
		if !a.probe {
			fellBack = true
		}
	}
	t.Fatalf("%s: no end", strings.Join(names, " "))
	return
}

func TestChoose(t *testing.T) {
	const unlimited = math.MaxInt64
	var (
		tcp        = fakeEnd{typ: tTCP, kind: kSock}
		unix       = fakeEnd{typ: tUnixStream, kind: kSock}
		unixgram   = fakeEnd{typ: tUnixMsg, kind: kNone}
		unixAnon   = fakeEnd{typ: tUnix, kind: kSock}
		unixAnonDg = fakeEnd{typ: tUnix, kind: kNone}
		bigFile    = fakeEnd{typ: tFile, kind: kFile, size: 1 << 30}
		smallFile  = fakeEnd{typ: tFile, kind: kFile, size: 100 << 10}
		pipe       = fakeEnd{typ: tFile, kind: kPipe}
		blocking   = fakeEnd{typ: tFile, kind: kNone} // a blocking pipe or tty
		wrapped    = fakeEnd{typ: tFD, kind: kSock}
		noFD       = fakeEnd{typ: tNone, kind: kNone}
	)
	tests := []struct {
		name     string
		limit    int64
		src, dst fakeEnd
		refuse   []step
		want     string
		fellBack bool
		probeDst bool
	}{
		// Rule 1: a file into a stream socket.
		{name: "big file to tcp splices", limit: unlimited, src: bigFile, dst: tcp, want: "stat-src splice"},
		{name: "big file to tcp with a short limit sends", limit: 64 << 10, src: bigFile, dst: tcp, want: "sendfile"},
		{name: "short file to tcp sends", limit: unlimited, src: smallFile, dst: tcp, want: "stat-src sendfile"},
		{name: "file to unix sends without stat", limit: unlimited, src: bigFile, dst: unix, want: "sendfile"},
		{name: "file to tcp at minZeroCopy sends", limit: minZeroCopy, src: smallFile, dst: tcp, want: "sendfile"},
		{name: "file to tcp below minZeroCopy reads", limit: minZeroCopy - 1, src: smallFile, dst: tcp, want: "read"},
		{name: "file without splice_read sends", limit: unlimited, src: bigFile, dst: tcp,
			refuse: []step{stepSplice}, want: "stat-src splice sendfile", fellBack: true},
		{name: "pipe to unix: the sendfile probe is no fallback", limit: unlimited, src: pipe, dst: unix,
			refuse: []step{stepSendfile}, want: "sendfile stat-src splice"},
		{name: "regular file refusing sendfile is a fallback", limit: unlimited, src: smallFile, dst: unix,
			refuse: []step{stepSendfile}, want: "sendfile stat-src splice", fellBack: true},
		{name: "short pipe copy after the probe reads", limit: 8 << 10, src: pipe, dst: tcp,
			refuse: []step{stepSendfile}, want: "sendfile read"},

		// Rule 2: short copies.
		{name: "short tcp to tcp reads", limit: minZeroCopy - 1, src: tcp, dst: tcp, want: "read"},
		{name: "4 KiB tcp to tcp splices", limit: minZeroCopy, src: tcp, dst: tcp, want: "splice"},
		{name: "16 KiB tcp to tcp splices", limit: smallCopy, src: tcp, dst: tcp, want: "splice"},
		{name: "16 KiB tcp to file reads without stat", limit: smallCopy, src: tcp, dst: bigFile, want: "read"},
		{name: "short unixgram copies", limit: 100, src: unixgram, dst: tcp, want: "copy"},
		{name: "short anonymous unix datagram copies", limit: 100, src: unixAnonDg, dst: tcp, want: "stat-src copy"},
		{name: "short anonymous unix stream reads", limit: 100, src: unixAnon, dst: tcp, want: "stat-src read"},
		{name: "short wrapped conn reads without stat", limit: 100, src: wrapped, dst: tcp, want: "read"},

		// Rule 3: ends the kernel paths cannot use.
		{name: "unixgram copies", limit: unlimited, src: unixgram, dst: tcp, want: "copy"},
		{name: "blocking pipe copies", limit: unlimited, src: blocking, dst: tcp,
			refuse: []step{stepSendfile}, want: "stat-src sendfile copy"},
		{name: "blocking pipe copies, short", limit: 64 << 10, src: blocking, dst: unix,
			refuse: []step{stepSendfile}, want: "sendfile stat-src copy"},
		{name: "no dst descriptor reads", limit: unlimited, src: tcp, dst: noFD, want: "read"},
		{name: "file to writer without descriptor reads", limit: unlimited, src: bigFile, dst: noFD, want: "stat-src read"},
		{name: "dst unixgram reads", limit: unlimited, src: tcp, dst: unixgram, want: "read"},

		// Rule 4: from a regular file.
		{name: "file to file copies ranges", limit: unlimited, src: bigFile, dst: bigFile, want: "stat-src stat-dst copy_file_range"},
		{name: "file to file falls back to sendfile", limit: unlimited, src: bigFile, dst: bigFile,
			refuse: []step{stepCopyFileRange}, want: "stat-src stat-dst copy_file_range sendfile", fellBack: true},
		{name: "file to file falls back to splice", limit: unlimited, src: bigFile, dst: bigFile,
			refuse: []step{stepCopyFileRange, stepSendfile}, want: "stat-src stat-dst copy_file_range sendfile splice", fellBack: true},
		{name: "file to pipe sends", limit: unlimited, src: bigFile, dst: pipe, want: "stat-src stat-dst sendfile"},
		{name: "file to wrapped socket sends", limit: unlimited, src: bigFile, dst: wrapped, want: "stat-src stat-dst sendfile"},

		// Rule 5: Unix into TCP.
		{name: "unix to tcp reads", limit: unlimited, src: unix, dst: tcp, want: "read"},
		{name: "unix to tcp past smallCopy reads", limit: smallCopy + 1, src: unix, dst: tcp, want: "read"},
		{name: "unix to tcp at smallCopy splices", limit: smallCopy, src: unix, dst: tcp, want: "splice"},
		{name: "anonymous unix to tcp reads", limit: unlimited, src: unixAnon, dst: tcp, want: "stat-src read"},
		{name: "tcp to unix splices", limit: unlimited, src: tcp, dst: unix, want: "splice"},

		// Rules 6 and 7: splice, then read.
		{name: "tcp to tcp splices", limit: unlimited, src: tcp, dst: tcp, want: "splice"},
		{name: "tcp to file splices unclassified", limit: unlimited, src: tcp, dst: bigFile, want: "splice", probeDst: true},
		{name: "pipe to file splices unclassified", limit: unlimited, src: pipe, dst: blocking,
			want: "stat-src splice", probeDst: true},
		{name: "tcp to pipe splices unclassified", limit: 1 << 20, src: tcp, dst: pipe, want: "splice", probeDst: true},
		{name: "tcp to wrapped pipe", limit: 1 << 20, src: tcp, dst: fakeEnd{typ: tFD, kind: kPipe}, want: "stat-dst splice"},
		{name: "wrapped to wrapped", limit: unlimited, src: wrapped, dst: wrapped, want: "stat-src stat-dst splice"},
		{name: "refused splice reads", limit: unlimited, src: tcp, dst: wrapped,
			refuse: []step{stepSplice}, want: "stat-dst splice read", fellBack: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fellBack, last := drive(t, tt.limit, tt.src, tt.dst, tt.refuse...)
			if got != tt.want {
				t.Errorf("steps %q, want %q", got, tt.want)
			}
			if fellBack != tt.fellBack {
				t.Errorf("fell back %v, want %v", fellBack, tt.fellBack)
			}
			if last.probeDst != tt.probeDst {
				t.Errorf("probeDst %v, want %v", last.probeDst, tt.probeDst)
			}
		})
	}
}

// TestChooseEnds: every combination of ends and limits reaches a buffered
// path when every kernel path refuses, never tries a path twice (drive
// checks), and classifies an end only when it could not know it otherwise.
func TestChooseEnds(t *testing.T) {
	types := []endType{tNone, tTCP, tUnixStream, tUnixMsg, tUnix, tFile, tFD}
	kinds := []kind{kNone, kSock, kPipe, kFile, kOther}
	limits := []int64{1, minZeroCopy - 1, minZeroCopy, smallCopy, smallCopy + 1, fileSpliceMin, math.MaxInt64}
	all := []step{stepSplice, stepSendfile, stepCopyFileRange}
	for _, st := range types[1:] {
		for _, dt := range types {
			for _, sk := range kinds {
				for _, dk := range kinds {
					src := fakeEnd{typ: st, kind: sk, size: fileSpliceMin}
					dst := fakeEnd{typ: dt, kind: dk}
					if e := newEnd(st); e.known {
						src.kind = e.kind
					}
					if e := newEnd(dt); e.known {
						dst.kind = e.kind
					}
					for _, n := range limits {
						trace, _, last := drive(t, n, src, dst, all...)
						if last.step != stepRead && last.step != stepCopy {
							t.Errorf("%v %v %v: ends with %s", src, dst, n, trace)
						}
						if src.kind == kNone && last.step != stepCopy && n > smallCopy {
							t.Errorf("%v %v %v: src without a usable descriptor: %s", src, dst, n, trace)
						}
						if strings.Contains(trace, "stat-") && (st == tTCP || st == tUnixStream || st == tUnixMsg) &&
							(dt == tTCP || dt == tUnixStream || dt == tUnixMsg || dt == tNone) {
							t.Errorf("%v %v %v: classifies an end its type tells: %s", src, dst, n, trace)
						}
					}
				}
			}
		}
	}
}

type fdConn struct{}

func (fdConn) SyscallConn() (syscall.RawConn, error) { return nil, nil }

func TestTypeOf(t *testing.T) {
	tests := []struct {
		v         any
		unwrapped bool
		want      endType
	}{
		{(*net.TCPConn)(nil), false, tTCP},
		{(*os.File)(nil), false, tFile},
		{os.Stdin, false, tFile},
		{fdConn{}, false, tNone},
		{fdConn{}, true, tFD},
		{new(bytes.Buffer), true, tNone},
	}
	for _, tt := range tests {
		if got := typeOf(tt.v, tt.unwrapped); got != tt.want {
			t.Errorf("typeOf(%T, %v) = %v, want %v", tt.v, tt.unwrapped, got, tt.want)
		}
	}
}

func TestChooseSyscalls(t *testing.T) {
	const unlimited = math.MaxInt64
	tests := []struct {
		name          string
		limit         int64
		src, dst, out endType
		want          syscalls
	}{
		{"proxy", unlimited, tTCP, tTCP, tTCP, syscalls{proxy: true, rawSrc: true, rawDst: true, rawOut: true}},
		{"proxy into a wrapper", unlimited, tTCP, tUnixStream, tNone, syscalls{proxy: true, rawSrc: true, rawDst: true}},
		{"unlimited file", unlimited, tFile, tTCP, tTCP, syscalls{}},
		{"short", smallCopy, tUnixStream, tFile, tFile, syscalls{rawSrc: true}},
		{"short datagram", 100, tUnixMsg, tTCP, tTCP, syscalls{rawSrc: true, rawDst: true, rawOut: true}},
		{"long bounded", smallCopy + 1, tTCP, tTCP, tTCP, syscalls{}},
		{"paced relay", smallCopy + 1, tTCP, tTCP, tTCP, syscalls{proxy: true, rawSrc: true, rawDst: true, rawOut: true}},
		{"paced relay into a file", smallCopy + 1, tTCP, tFile, tFile, syscalls{}},
	}
	for _, tt := range tests {
		if got := chooseSyscalls(tt.limit, strings.HasPrefix(tt.name, "paced relay"), tt.src, tt.dst, tt.out); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
