// Command zeroio is the command-line face of the zeroio library: a relay
// for TCP, Unix-socket and UDP traffic built on its packages, and the
// benchmark harness that measures them against their peers.
//
//   - `zeroio relay` forwards traffic by routes given as flags or a YAML
//     file, with Prometheus metrics and graceful reloads.
//   - `zeroio bench` runs the side-by-side benchmark suites in interleaved
//     rounds and writes a table, JSON, benchstat input and an HTML report.
//   - `zeroio version` prints the version and build information.
//
// Run `zeroio help` or `zeroio COMMAND --help` for usage; the README has
// the full reference.
package main
