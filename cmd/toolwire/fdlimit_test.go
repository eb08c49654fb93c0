package main

import (
	"strings"
	"testing"
)

// TestFDWarning: a server whose RLIMIT_NOFILE is below what its ports may
// hold (prlimit --nofile=64 under the defaults' 4096 + 4096) started
// without a word, and met the limit as clients waiting in the backlog and
// tools that could not open files.
func TestFDWarning(t *testing.T) {
	t.Parallel()
	var grpcOnly, both, unbounded, small serveConfig
	both.HTTPConfig.Listen = "127.0.0.1:0"
	unbounded.ServiceConfig.MaxConnections = -1
	small.ServiceConfig.MaxConnections = 100
	tests := []struct {
		name  string
		cfg   serveConfig
		limit uint64
		want  string // "" no warning
	}{
		{"gRPC port, defaults, low limit", grpcOnly, 64, "the server may open 64 file descriptors (RLIMIT_NOFILE), fewer than its ports may keep connections open (max_connections 4096, http_max_connections 0)"},
		{"both ports, defaults", both, 4096, "max_connections 4096, http_max_connections 4096"},
		{"both ports, room enough", both, 1 << 20, ""},
		{"gRPC port, room enough", grpcOnly, 4096 + fdRoom, ""},
		{"no bound: only the server's own room counts", unbounded, 64, "max_connections no bound, http_max_connections 0) with 256 for its own"},
		{"no bound, room for its own", unbounded, 1024, ""},
		{"a small bound", small, 512, ""},
		{"a small bound, smaller limit", small, 300, "max_connections 100"},
	}
	for _, tt := range tests {
		got := fdWarning(tt.cfg, tt.limit)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: fdWarning = %q; want %q", tt.name, got, tt.want)
		}
	}
}
