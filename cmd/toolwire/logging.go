package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/toolwire/toolwire/engine"
)

// newLogger returns serve's logger, writing to stderr as cfg's logging
// section says, through the service's handler that adds batch and call IDs.
func newLogger(cfg serveConfig, stderr io.Writer) (*slog.Logger, error) {
	h, err := cfg.LoggingConfig.Handler(stderr)
	if err != nil {
		return nil, err
	}
	return slog.New(engine.LogHandler(h)), nil
}

// routeLibraryLogs sends what the OpenTelemetry SDK and the Redis client
// log to log, in its format, instead of to the standard logger's plain
// lines on stderr, which a JSON log collector cannot parse. Both libraries
// keep their logger in a global, so this is for main's serve alone.
func routeLibraryLogs(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "error", err.Error())
	}))
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	goredis.SetLogger(redisLogger{log})
}

// redisLogger adapts slog to the Redis client's Printf logger. The client
// logs what went wrong (failed dials, broken connections), so at Warn.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client: "+strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"))
}
