package engine

import (
	"context"
	"log/slog"
	"strings"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Debug lines: one per call when its result is recorded and one per batch
// when Run returns, naming the batch, the call and the tool, the outcome
// and the duration, and the batch's lane plan. They are built only when
// the logger is enabled at debug level, so at the default level a call
// costs no allocation for them. Outcomes are spelt one way: "ok", or the
// contract's error kind or gRPC's status code as their specifications
// write them, in lower case ("cancelled", "tool_error",
// "deadline_exceeded").

// debugLogFor returns the Observer that writes the debug call log to log
// (one line per call when its result is recorded, one per batch when Run
// returns), or nil when log does not write debug lines. New adds it to the
// engine's Observer by itself.
func debugLogFor(log *slog.Logger) Observer {
	if log == nil || !log.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	return debugLog{log}
}

// debugLog is the debug call log as an Observer.
type debugLog struct{ log *slog.Logger }

func (debugLog) BatchStarted(ctx context.Context, _ *BatchInfo) context.Context { return ctx }
func (debugLog) LaneStarted(context.Context, *BatchInfo, int)                   {}
func (debugLog) StreamEnded(context.Context, *BatchInfo, string)                {}
func (debugLog) CallStarted(ctx context.Context, _ *CallInfo) context.Context   { return ctx }
func (debugLog) CallRunning(context.Context, *CallInfo)                         {}
func (debugLog) CallAbandoned(context.Context, *CallInfo)                       {}

// CallEnded logs the call's result.
func (d debugLog) CallEnded(_ context.Context, c *CallInfo, res *toolwirev1.CallResult) {
	d.log.LogAttrs(context.Background(), slog.LevelDebug, "call finished",
		slog.String("batch_id", c.Batch.ID),
		slog.String("call_id", res.GetCallId()),
		slog.String("tool", res.GetToolName()),
		slog.String("outcome", resultOutcome(res)),
		slog.Duration("duration", res.GetDuration().AsDuration()),
		slog.Bool("replayed", res.GetReplayed()))
}

// BatchEnded logs the end of the batch; err is what Run returns.
func (d debugLog) BatchEnded(_ context.Context, info *BatchInfo, n BatchCounts, err error) {
	b := info.b
	code := CodeOf(err)
	if code == Unknown && b.callerCtx.Err() != nil {
		// A sink's own error (a gRPC stream's Send after the client
		// went) carries no engine code; the caller's context says why.
		code = CodeOf(b.callerCtx.Err())
	}
	d.log.LogAttrs(context.Background(), slog.LevelDebug, "batch finished",
		slog.String("batch_id", b.id),
		slog.Int("calls", len(b.req.GetCalls())),
		slog.Any("lanes", b.laneIDs()),
		slog.Int("succeeded", n.Succeeded),
		slog.Int("failed", n.Failed+n.Skipped),
		slog.Int("unanswered", n.Unanswered),
		slog.String("outcome", code.outcome()),
		slog.Duration("duration", time.Since(b.start)))
}

// laneIDs is the batch's lane plan as its call IDs, lane by lane: a lane
// of more than one call ran them in parallel.
func (b *batch) laneIDs() [][]string {
	lanes := make([][]string, len(b.lanes))
	for i, l := range b.lanes {
		lanes[i] = make([]string, len(l.Calls))
		for j, c := range l.Calls {
			lanes[i][j] = b.req.GetCalls()[c].GetCallId()
		}
	}
	return lanes
}

// outcomes are the codes as the batch line spells them: gRPC's status code
// names (its specification's, CANCELLED among them), in lower case.
var outcomes = [...]string{
	OK:                "ok",
	Canceled:          "cancelled",
	Unknown:           "unknown",
	InvalidArgument:   "invalid_argument",
	DeadlineExceeded:  "deadline_exceeded",
	ResourceExhausted: "resource_exhausted",
	Unavailable:       "unavailable",
	Internal:          "internal",
}

// outcome is c as the batch's debug line says it.
func (c Code) outcome() string {
	if c >= 0 && int(c) < len(outcomes) {
		return outcomes[c]
	}
	return "unknown"
}

// resultOutcome is "ok" for a successful result, else its error kind in lower
// case ("tool_error", "timeout", …).
func resultOutcome(res *toolwirev1.CallResult) string {
	if !res.GetIsError() {
		return "ok"
	}
	return strings.ToLower(strings.TrimPrefix(res.GetErrorKind().String(), "ERROR_KIND_"))
}
