package main

import (
	"fmt"
	"syscall"

	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/service/httpserve"
)

// fdRoom is what fdWarning allows the server for its own descriptors
// beside its connections: the store, the workspace, commands' pipes and
// supervisors, tool sources, logs.
const fdRoom = 256

// fdWarning says, when the descriptors the process may open (limit, its
// RLIMIT_NOFILE) are fewer than the connections its ports may keep open
// with room for its own, what that does and what to change; "" otherwise.
// Past the limit a port cannot accept, new clients wait in the listen
// backlog and the tools cannot open files, long before max_connections
// refuses anyone.
func fdWarning(cfg serveConfig, limit uint64) string {
	conns := func(max, def int) int {
		switch {
		case max < 0:
			return 0 // no bound: nothing to compare
		case max == 0:
			return def
		}
		return max
	}
	grpcConns := conns(cfg.ServiceConfig.MaxConnections, grpcserve.DefaultMaxConnections)
	httpConns := 0
	if cfg.HTTPConfig.Listen != "" {
		httpConns = conns(cfg.HTTPConfig.MaxConnections, httpserve.DefaultMaxConnections)
	}
	need := uint64(grpcConns + httpConns + fdRoom)
	if limit >= need {
		return ""
	}
	label := func(max, n int) string {
		if max < 0 {
			return "no bound"
		}
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("the server may open %d file descriptors (RLIMIT_NOFILE), fewer than its ports may keep connections open (max_connections %s, http_max_connections %s) with %d for its own: past it, new connections wait and tools cannot open files (raise ulimit -n, or lower max_connections and http_max_connections)",
		limit, label(cfg.ServiceConfig.MaxConnections, grpcConns), label(cfg.HTTPConfig.MaxConnections, httpConns), fdRoom)
}

// nofile is the process's RLIMIT_NOFILE (Go raises the soft limit to the
// hard one at start); 0 when it cannot be read.
func nofile() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return l.Cur
}
