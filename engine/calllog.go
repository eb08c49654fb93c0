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

// debugging reports whether the server logs at debug level.
func (e *Engine) debugging() bool {
	return e.cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
}

// logCall logs call i's result.
func (b *batch) logCall(i int, res *toolwirev1.CallResult) {
	if !b.e.debugging() {
		return
	}
	b.e.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "call finished",
		slog.String("batch_id", b.id),
		slog.String("call_id", res.GetCallId()),
		slog.String("tool", res.GetToolName()),
		slog.String("outcome", resultOutcome(res)),
		slog.Duration("duration", res.GetDuration().AsDuration()),
		slog.Bool("replayed", res.GetReplayed()))
}

// logBatch logs the end of the batch; err is what Run returns.
func (b *batch) logBatch(err error) {
	if !b.e.debugging() {
		return
	}
	var ok, failed, missing int
	for i := range b.calls {
		r := &b.calls[i].ended
		switch {
		case !r.ended:
			missing++ // the batch ended before the call had a result
		case r.isError:
			failed++
		default:
			ok++
		}
	}
	code := CodeOf(err)
	if code == Unknown && b.callerCtx.Err() != nil {
		// A sink's own error (a gRPC stream's Send after the client
		// went) carries no engine code; the caller's context says why.
		code = CodeOf(b.callerCtx.Err())
	}
	b.e.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "batch finished",
		slog.String("batch_id", b.id),
		slog.Int("calls", len(b.req.GetCalls())),
		slog.Any("lanes", b.laneIDs()),
		slog.Int("succeeded", ok),
		slog.Int("failed", failed),
		slog.Int("unanswered", missing),
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
