package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// logFormatFlag is -log-format: auto (text on a terminal, JSON otherwise),
// json or text.
type logFormatFlag struct{ format string }

func (f *logFormatFlag) String() string {
	if f == nil || f.format == "" {
		return "auto"
	}
	return f.format
}

func (f *logFormatFlag) Set(s string) error {
	switch s {
	case "auto", "json", "text":
		f.format = s
		return nil
	}
	return fmt.Errorf("log format %q: auto, json or text", s)
}

// newLogHandler writes logs to w in format; auto picks text when w is a
// terminal (a developer reading) and JSON otherwise (a collector reading).
func newLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" || (format == "" || format == "auto") && isTerminal(w) {
		return slog.NewTextHandler(w, opts)
	}
	return slog.NewJSONHandler(w, opts)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// useLogFormat rebuilds the command's logger in the format asked for (the
// flag is parsed after the logger was first made).
func (a *cli) useLogFormat(f *logFormatFlag) {
	a.logger = slog.New(newLogHandler(a.stderr, f.format, a.level))
	if a.isDefault {
		slog.SetDefault(a.logger)
	}
}
