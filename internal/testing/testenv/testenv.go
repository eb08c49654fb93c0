// Package testenv lets tests that need something from outside Go (a program
// such as grpcurl, later Redis, Python or Node) skip when it is missing on a
// developer's machine, but fail in CI, where .ci/run installs everything and
// sets TOOLWIRE_TEST_REQUIRE_ALL=1, so a missing install step cannot hide
// behind a skip.
//
// It imports only the standard library and is for tests: no non-test package
// may import it.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireAllVar is the environment variable that turns skips into failures.
const RequireAllVar = "TOOLWIRE_TEST_REQUIRE_ALL"

// Missing skips the test, or fails it when RequireAllVar is set, saying what
// is missing.
func Missing(tb testing.TB, what string) {
	tb.Helper()
	if os.Getenv(RequireAllVar) != "" {
		tb.Fatalf("%s is missing, and %s is set: .ci/run must install it", what, RequireAllVar)
	}
	tb.Skipf("%s is missing; set %s=1 to make this a failure", what, RequireAllVar)
}

// LookPath returns the path of the named program, or reports it Missing.
func LookPath(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, "the program "+name)
	}
	return path
}
