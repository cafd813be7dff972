//go:build !linux

package bench

// The splice benchmarks run on Linux only: their peers are child
// processes handed sockets through ExtraFiles with socketpair(2), and
// elsewhere splice.Copy is a buffered copy like io.Copy.
