package testenv

import (
	"os"
	"testing"
)

// RedisAddrVar names the environment variable that gives tests the address
// (host:port) of a real Redis server they may use; .ci/run starts one.
const RedisAddrVar = "TOOLWIRE_TEST_REDIS_ADDR"

// RedisAddr returns the address of the real Redis server tests may use, or
// reports it Missing.
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	addr := os.Getenv(RedisAddrVar)
	if addr == "" {
		Missing(tb, "a Redis server ("+RedisAddrVar+")")
	}
	return addr
}
