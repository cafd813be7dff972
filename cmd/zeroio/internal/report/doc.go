// Package report summarizes and writes what zeroio bench measured: the
// medians of each case's samples, one row per configuration with zeroio's
// ratio to the best peer and to the C floor and the p-values of those
// comparisons (benchstat's test), and the four output files: table.txt,
// bench.txt (Go benchmark format), results.json and report.html.
//
// The suites and their cases live in package bench; zeroio bench runs
// them and fills a [Report] with their samples.
package report
