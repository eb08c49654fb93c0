package main

import (
	stdgzip "compress/gzip"

	"github.com/toolwire/toolwire/service/grpcserve"
)

// The gRPC port gzips large listings for clients that accept gzip
// (grpcserve.Server's ListTools and SearchTools). At gzip's fastest level a
// GitHub-shaped catalog shrinks to about a quarter, at its default a
// fifth, but the default takes about three times the CPU (bench/catalog:
// 10,000 tools, 45 MB, in 2.3 s against 6.6 s on a busy 2-core machine),
// and a listing is sent while a runtime waits for it. grpc-go keeps one
// gzip compressor per process, set only while the program starts, so the
// binary that serves sets it here; package service leaves the process's
// choice alone.
func init() {
	if err := grpcserve.SetGzipLevel(stdgzip.BestSpeed); err != nil {
		panic(err) // a constant level
	}
}
