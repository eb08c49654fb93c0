//go:build race

package e2e

// raceEnabled: the race detector is on. Its shadow checks of a range of
// memory (a 10 MiB string made from the file read, each copy) cannot be
// preempted and cost hundreds of milliseconds on such sizes, which a
// tool cannot cancel through; tests that measure how soon a tool stops
// use smaller inputs under it.
const raceEnabled = true
