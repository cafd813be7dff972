// Package bench holds zeroio's side-by-side benchmark suites: each zeroio
// component measured in the same run as the standard library and the Go
// peers people use today, with benchstat-friendly names
// (BenchmarkPool/impl=zeroio-sized/size=4096).
//
// The peers are imported only here and in cmd/zeroio, never by the library
// packages.
package bench
