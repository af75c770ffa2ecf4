// Package bench holds the pieces of `make bench` (scripts/bench.sh) that are
// worth testing on their own: the in-pod command timer that runs every
// measured command and its baseline interleaved in one process, the summary
// statistics (median, p95), the launcher log parser that splits init time by
// phase, and /proc memory accounting (RSS, PSS, process trees).
//
// The driver is test/bench/cmd/podmpi-bench; BENCHMARKS.md describes what it
// measures and how.
package bench
