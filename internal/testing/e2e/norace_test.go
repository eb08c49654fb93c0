//go:build !race

package e2e

// raceEnabled: the race detector is on (see race_test.go).
const raceEnabled = false
