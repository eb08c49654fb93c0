package service

import (
	"log/slog"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/store"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config tunes a Server: the engine's settings (see engine.Config, to
// which they are handed) and the transport's. The zero value of every field means its default, so
// Config{} is a usable configuration.
type Config struct {
	// Listen is the address ListenAndServe listens on. Default
	// 127.0.0.1:50051.
	Listen string
	// MaxConcurrentBatches bounds the batches running at once; a batch
	// beyond it is refused with RESOURCE_EXHAUSTED, so an overloaded server
	// sheds load instead of queueing it without bound. Default 4096.
	MaxConcurrentBatches int
	// MaxCallsPerBatch bounds the calls in one batch; more is INVALID_ARGUMENT.
	// Default 1024.
	MaxCallsPerBatch int
	// MaxArgumentBytes bounds one call's arguments; more is INVALID_ARGUMENT.
	// Default 1 MiB.
	MaxArgumentBytes int
	// MaxResultBytes caps one result's output (text, images, structured
	// content and details together); the rest is cut with a visible marker.
	// It holds for every result, errors included, and for each progress
	// report's message and output together. Default 256 KiB; at most
	// MaxMessageBytes less 64 KiB.
	MaxResultBytes int
	// DefaultCallTimeout applies to calls whose call and tool set no timeout.
	// Default 60s.
	DefaultCallTimeout time.Duration
	// MaxCallTimeout caps every call's timeout. Default 10m.
	MaxCallTimeout time.Duration
	// IdleTimeout, when positive, times a call out after this long without a
	// progress report; every report extends it, up to the call's deadline.
	// Default off.
	IdleTimeout time.Duration
	// DeadlineMargin is kept free before the RPC's deadline, so a call timed
	// out by it can still send its result. Default 50ms.
	DeadlineMargin time.Duration
	// MaxParallel bounds the calls running at once in one parallel lane; a
	// batch may ask for less. Default 16.
	MaxParallel int
	// AbandonGrace is how long a cancelled or timed-out tool may take to
	// return before its result is sent without it and the tool is abandoned.
	// Default 2s.
	AbandonGrace time.Duration
	// DrainTimeout is how long shutdown lets running batches finish before
	// cancelling their calls. Default 30s.
	DrainTimeout time.Duration
	// MaxStreamBufferBytes bounds the encoded size of one batch's events
	// waiting for a slow reader, counting the one being sent; beyond it the
	// batch's calls wait to report (their concurrency slots already given
	// back once their tools have returned). An event larger than the budget
	// is still sent once nothing else waits. Default 1 MiB.
	MaxStreamBufferBytes int
	// EventBuffer bounds the number of one batch's events waiting for a slow
	// reader, a second cap beside MaxStreamBufferBytes for many small events.
	// Default 64.
	EventBuffer int
	// SendTimeout ends a stream whose client has taken no event for this
	// long while one was waiting to be sent (it reads nothing, so flow
	// control stops the server): the batch's calls are cancelled, their
	// results still recorded under their idempotency keys, and the RPC ends
	// with DEADLINE_EXCEEDED. Ending a send that flow control holds needs
	// the tap handle in ServerOptions; without it only the calls are
	// cancelled. Default 30s.
	SendTimeout time.Duration
	// Safe overrides, per tool name, whether a tool's calls may share a
	// parallel lane; by default a tool is safe when it is read-only.
	Safe map[string]bool
	// Idempotency keeps the records that replay calls sent again with an
	// idempotency key, and Sessions the session variables; one backend
	// (store.Store) usually serves both. The caller closes them after the
	// server has stopped. Default: one new in-memory store (store/memory)
	// for whichever is unset, which the server does not share.
	Idempotency store.Idempotency
	Sessions    store.Sessions
	// IdempotencyTTL is how long a completed call with an idempotency key
	// is replayed instead of run again. Default 24h.
	IdempotencyTTL time.Duration
	// IdempotencyLease is how long a claim on a running call lasts unless
	// renewed (a third of it in, while the tool runs); a replica that dies
	// delays retries of its calls by up to this long. Default 10s.
	IdempotencyLease time.Duration
	// SessionTTL is how long a session variable lives after it was last
	// set. Default 24h.
	SessionTTL time.Duration
	// Permissions decides which tools each caller (see Caller) may list and
	// call. Default nil: every caller may call every tool.
	Permissions Permissions
	// Limits bounds concurrent calls, message sizes and connections; see
	// Limits for each field and its default.
	Limits
	// Logger receives the server's logs, through LogHandler so that lines
	// about a batch or call carry its IDs and trace. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the server's spans: the RPC's (otelgrpc), one
	// per batch and one per call. Default nil: no spans. Pass the provider
	// of the SDK the program installed; OpenTelemetry's globals are not
	// consulted, so the choice is made once, in New (see
	// engine.OpenTelemetry).
	TracerProvider trace.TracerProvider
	// MeterProvider makes the server's metrics. Default nil: none, as for
	// TracerProvider.
	MeterProvider metric.MeterProvider
	// TraceContent records each call's arguments and result in its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result). They may hold
	// personal or secret data, so the default is off.
	TraceContent bool
}

// engine returns the engine's part of c.
func (c Config) engine() engine.Config {
	return engine.Config{
		MaxConcurrentBatches: c.MaxConcurrentBatches,
		MaxCallsPerBatch:     c.MaxCallsPerBatch,
		MaxArgumentBytes:     c.MaxArgumentBytes,
		MaxResultBytes:       c.MaxResultBytes,
		DefaultCallTimeout:   c.DefaultCallTimeout,
		MaxCallTimeout:       c.MaxCallTimeout,
		IdleTimeout:          c.IdleTimeout,
		DeadlineMargin:       c.DeadlineMargin,
		MaxParallel:          c.MaxParallel,
		AbandonGrace:         c.AbandonGrace,
		DrainTimeout:         c.DrainTimeout,
		MaxStreamBufferBytes: c.MaxStreamBufferBytes,
		EventBuffer:          c.EventBuffer,
		SendTimeout:          c.SendTimeout,
		Safe:                 c.Safe,
		Idempotency:          c.Idempotency,
		Sessions:             c.Sessions,
		IdempotencyTTL:       c.IdempotencyTTL,
		IdempotencyLease:     c.IdempotencyLease,
		SessionTTL:           c.SessionTTL,
		Permissions:          c.Permissions,
		MaxConcurrentCalls:   c.MaxConcurrentCalls,
		MaxQueueWait:         c.MaxQueueWait,
		MaxCallsPerCaller:    c.MaxCallsPerCaller,
		MaxMessageBytes:      c.MaxMessageBytes,
		Logger:               c.Logger,
		Telemetry:            engine.OpenTelemetry(c.TracerProvider, c.MeterProvider, c.TraceContent),
	}
}

// withDefaults returns c with the defaults of the transport's settings
// filled in, and the engine's settings as ec (the engine's Config, its
// defaults filled in) has them.
func (c Config) withDefaults(ec engine.Config) Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:50051"
	}
	c.MaxConcurrentBatches, c.MaxCallsPerBatch, c.MaxArgumentBytes, c.MaxResultBytes = ec.MaxConcurrentBatches, ec.MaxCallsPerBatch, ec.MaxArgumentBytes, ec.MaxResultBytes
	c.DefaultCallTimeout, c.MaxCallTimeout, c.IdleTimeout, c.DeadlineMargin = ec.DefaultCallTimeout, ec.MaxCallTimeout, ec.IdleTimeout, ec.DeadlineMargin
	c.MaxParallel, c.AbandonGrace, c.DrainTimeout = ec.MaxParallel, ec.AbandonGrace, ec.DrainTimeout
	c.MaxStreamBufferBytes, c.EventBuffer, c.SendTimeout = ec.MaxStreamBufferBytes, ec.EventBuffer, ec.SendTimeout
	c.Idempotency, c.Sessions = ec.Idempotency, ec.Sessions
	c.IdempotencyTTL, c.IdempotencyLease, c.SessionTTL = ec.IdempotencyTTL, ec.IdempotencyLease, ec.SessionTTL
	c.MaxConcurrentCalls, c.MaxQueueWait, c.MaxMessageBytes = ec.MaxConcurrentCalls, ec.MaxQueueWait, ec.MaxMessageBytes
	c.Logger = ec.Logger
	c.Limits = c.Limits.withDefaults(ec.MaxCallTimeout)
	return c
}
