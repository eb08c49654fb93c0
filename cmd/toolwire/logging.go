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

	"github.com/toolwire/toolwire/service"
)

// newLogger returns serve's logger, writing to stderr at cfg's level in
// cfg's format: text for a person at a terminal, JSON (one object a line)
// for a log collector, and by default whichever stderr looks like.
func newLogger(cfg serveConfig, stderr io.Writer) (*slog.Logger, error) {
	level, err := cfg.logLevel()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch cfg.LogFormat {
	case "text":
		h = slog.NewTextHandler(stderr, opts)
	case "json":
		opts.ReplaceAttr = durationsAsText
		h = slog.NewJSONHandler(stderr, opts)
	case "":
		if isTerminal(stderr) {
			h = slog.NewTextHandler(stderr, opts)
		} else {
			opts.ReplaceAttr = durationsAsText
			h = slog.NewJSONHandler(stderr, opts)
		}
	default:
		return nil, fmt.Errorf("log format %q: want text or json", cfg.LogFormat)
	}
	return slog.New(service.LogHandler(h)), nil
}

// durationsAsText writes durations as "500ms" rather than slog's JSON
// default, a count of nanoseconds nobody reads at a glance. (The text
// handler does this itself.)
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
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
