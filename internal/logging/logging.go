// Package logging is the log setting of "toolwire serve": the level and
// format of its slog lines (log_level, log_format, and their flags). It
// makes the handler; what wraps it (the service's batch and call IDs) and
// where library logs go stay with the program, so this package imports
// nothing of toolwire's.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// Config says how serve logs. DefaultConfig has its defaults.
type Config struct {
	Level  string `json:"log_level"`  // debug, info, warn or error
	Format string `json:"log_format"` // text or json; "" picks text on a terminal, JSON otherwise
}

// DefaultConfig returns the defaults: level info, format by terminal.
func DefaultConfig() Config { return Config{Level: "info"} }

// Flags registers --log-level and --log-format on fs, writing into c.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Level, "log-level", c.Level, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.Format, "log-format", c.Format, "log `format`: text or json (default text when stderr is a terminal, json otherwise)")
}

// Validate checks the level and the format.
func (c Config) Validate() error {
	if _, err := c.level(); err != nil {
		return err
	}
	switch c.Format {
	case "", "text", "json":
		return nil
	}
	return fmt.Errorf("log format %q: want text or json", c.Format)
}

func (c Config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.Level)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", c.Level)
	}
	return l, nil
}

// Handler returns a handler writing to w at c's level in c's format: text
// for a person at a terminal, JSON (one object a line) for a log
// collector, and by default whichever w looks like.
func (c Config) Handler(w io.Writer) (slog.Handler, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	level, _ := c.level()
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" || c.Format == "" && isTerminal(w) {
		return slog.NewTextHandler(w, opts), nil
	}
	opts.ReplaceAttr = durationsAsText
	return slog.NewJSONHandler(w, opts), nil
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

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
