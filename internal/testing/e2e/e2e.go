// Package e2e holds end-to-end fault tests that run toolwire as real
// processes on loopback: replicas sharing Redis killed mid-batch, a restart
// on a bbolt file, a graceful drain under load, concurrent duplicates. The
// countserver command is the server they run where a side effect must be
// counted. One test, TestBuiltinsStopWhenCancelled, serves every built-in
// tool in process instead, to read the server's abandoned counter and the
// goroutine count.
//
// It drives toolwire only from outside, as processes over sockets; no non-
// test package may import it.
package e2e
