package service

import (
	"flag"
	"time"
)

// Limits bounds the work a server takes on and the connections it keeps.
// The zero value of every field means its default. Its keys sit at the top
// level of serve's config file; Flags registers the flags of some.
type Limits struct {
	// MaxConcurrentCalls bounds the tool calls running at once across the
	// server. A batch is accepted only once a slot is free for its first
	// call; it waits up to MaxQueueWait for one, then fails with
	// RESOURCE_EXHAUSTED. The other calls of an accepted batch wait for a
	// slot up to their own timeout (and the RPC's deadline); a call whose
	// wait runs out gets a TIMEOUT result and was not run. Default 4096.
	MaxConcurrentCalls int `json:"max_concurrent_calls"`
	// MaxQueueWait is how long a batch waits for a slot before it is refused
	// with RESOURCE_EXHAUSTED. Default 5s.
	MaxQueueWait time.Duration `json:"max_queue_wait"`
	// MaxCallsPerCaller bounds the calls of one caller (see Caller) running
	// at once, with the same queueing as MaxConcurrentCalls, so that one
	// busy agent cannot take every slot. Set, it applies to every caller,
	// the anonymous one included (without authentication everyone is that
	// one caller). Default 0: a quarter of MaxConcurrentCalls (at least 1)
	// for each authenticated caller, and no cap on the anonymous caller,
	// which a cap would only make a smaller MaxConcurrentCalls. Negative:
	// no per-caller cap at all.
	MaxCallsPerCaller int `json:"max_calls_per_caller"`
	// MaxMessageBytes bounds every gRPC message received and sent; a larger
	// request fails with RESOURCE_EXHAUSTED. It must leave room for a
	// result of MaxResultBytes. Default 4 MiB.
	MaxMessageBytes int `json:"max_message_bytes"`
	// KeepaliveMinTime is the shortest interval at which a client may ping;
	// a client that pings more often is sent GOAWAY ("too_many_pings") and
	// disconnected. Pings without active RPCs are permitted. Default 10s
	// (grpc-go clients cannot ping more often anyway).
	KeepaliveMinTime time.Duration `json:"keepalive_min_time"`
	// KeepaliveTime is how long a connection may be idle before the server
	// pings it, and KeepaliveTimeout how long it then waits for the answer
	// before closing the connection, so dead peers are noticed. Defaults 1m
	// and 20s.
	KeepaliveTime    time.Duration `json:"keepalive_time"`
	KeepaliveTimeout time.Duration `json:"keepalive_timeout"`
	// MaxConnectionAge, when positive, makes the server send GOAWAY to a
	// connection after about this long (gRPC adds ±10% jitter), so that
	// clients reconnect and spread over the replicas behind a load
	// balancer, including ones added since they connected. RPCs in flight
	// get MaxConnectionAgeGrace to finish before the connection is closed.
	// Default 0: connections live forever; 5m to 30m suits replicated
	// deployments.
	MaxConnectionAge time.Duration `json:"max_connection_age"`
	// MaxConnectionAgeGrace is how long RPCs in flight may continue on a
	// connection past its MaxConnectionAge. Default MaxCallTimeout, so a
	// call started just before the GOAWAY can finish.
	MaxConnectionAgeGrace time.Duration `json:"max_connection_age_grace"`
}

// Flags registers the flags of l's most used settings on fs; each writes
// into l. The rest are set in the config file.
func (l *Limits) Flags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxConcurrentCalls, "max-concurrent-calls", l.MaxConcurrentCalls, "most tool calls running at once; more queue (0: 4096)")
	fs.DurationVar(&l.MaxQueueWait, "max-queue-wait", l.MaxQueueWait, "how long a batch waits for a free call slot before RESOURCE_EXHAUSTED (0: 5s)")
	fs.IntVar(&l.MaxCallsPerCaller, "max-calls-per-caller", l.MaxCallsPerCaller, "most tool calls of one caller running at once (0: a quarter of --max-concurrent-calls for each authenticated caller; -1: no cap)")
	fs.IntVar(&l.MaxMessageBytes, "max-message-bytes", l.MaxMessageBytes, "largest gRPC message received or sent, in bytes (0: 4 MiB)")
	fs.DurationVar(&l.MaxConnectionAge, "max-connection-age", l.MaxConnectionAge, "close connections after about this long so clients rebalance (0: never)")
}

// withDefaults fills in the transport's defaults; the engine's
// (MaxConcurrentCalls, MaxQueueWait, MaxCallsPerCaller, MaxMessageBytes)
// are engine.Config's.
func (l Limits) withDefaults(maxCallTimeout time.Duration) Limits {
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&l.KeepaliveMinTime, 10*time.Second)
	defDur(&l.KeepaliveTime, time.Minute)
	defDur(&l.KeepaliveTimeout, 20*time.Second)
	l.MaxConnectionAge = max(l.MaxConnectionAge, 0)
	defDur(&l.MaxConnectionAgeGrace, maxCallTimeout)
	return l
}
