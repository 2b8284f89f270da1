// Package logging builds the process logger and renders CSI messages for
// it.
//
// New makes the one *slog.Logger of a process from --log-format and
// --log-level: "text" is tint's handler for people (colour only on a
// terminal), "json" is slog's JSON handler for log collectors. Both print
// every time.Duration attribute in a unit a reader takes in at a glance:
// text as a rounded Go duration (duration=6.33ms), JSON as seconds in a
// float ("duration":0.00633), the unit Prometheus uses too.
//
// Sanitized wraps a CSI request or response so that a log line never shows
// its secrets (csi-lib-utils' protosanitizer) and costs nothing unless the
// line is printed.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// New returns a logger writing to w in format "text" (tint; colour only on
// a terminal) or "json", at level debug, info, warn or error.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: bounded(durationSeconds)})), nil
	case "text", "":
		noColor := true
		if f, ok := w.(*os.File); ok {
			noColor = !isatty.IsTerminal(f.Fd())
		}
		return slog.New(tint.NewTextHandler(w, &tint.Options{
			Level: lvl, NoColor: noColor, TimeFormat: "15:04:05.000", ReplaceAttr: bounded(durationRounded),
		})), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// Bounds on what one log line carries, whatever a caller, an upstream or
// a file sent: a 4 MiB request must not make a 4 MiB line. MaxValue is
// longer than any ID the proxy makes (3+63+1024 bytes), so a valid ID is
// never cut; MaxDump bounds the request and response printed at debug and
// a panic's stack.
const (
	MaxValue = 2 << 10
	MaxDump  = 16 << 10
)

// dumps are the attributes bounded by MaxDump.
var dumps = map[string]bool{"request": true, "response": true, "stack": true}

// bounded wraps a ReplaceAttr so that every string and error value, and
// the message, is cut (clip.String: its first bytes, "…(N bytes)"). The
// handlers quote what needs quoting (a newline, a quote, a space), so a
// value stays in its field.
func bounded(next func([]string, slog.Attr) slog.Attr) func([]string, slog.Attr) slog.Attr {
	return func(groups []string, a slog.Attr) slog.Attr {
		limit := MaxValue
		if dumps[a.Key] {
			limit = MaxDump
		}
		switch a.Value.Kind() {
		case slog.KindString:
			if s := a.Value.String(); len(s) > limit {
				a.Value = slog.StringValue(clip.String(s, limit))
			}
		case slog.KindAny:
			if err, ok := a.Value.Any().(error); ok {
				if s := err.Error(); len(s) > limit {
					a.Value = slog.StringValue(clip.String(s, limit))
				}
			}
		}
		return next(groups, a)
	}
}

// Caller is a string a caller sent (a connection name, a volume ID, a
// request name) as a log attribute shows it: cut to clip.Max bytes with its
// length stated, far below MaxValue, since a valid one is that short.
func Caller(s string) string { return clip.String(s, clip.Max) }

// durationSeconds prints durations as float seconds; slog's JSON handler
// would print integer nanoseconds.
func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}

// durationRounded keeps durations as durations (printed as 6.33ms, 1.2s),
// rounded to three significant digits: 6.334378ms says no more than 6.33ms
// does, and is harder to read.
func durationRounded(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.DurationValue(Round(a.Value.Duration()))
	}
	return a
}

// Round rounds d to three significant digits.
func Round(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for d/unit >= 1000 || -d/unit >= 1000 {
		unit *= 10
	}
	return d.Round(unit)
}

// Sanitized wraps a CSI message so that logging it prints the message with
// every secret field replaced by "***stripped***". It is a LogValuer because
// slog's JSON handler would print the plain Stringer as {}; the string is
// built only when a handler actually renders the record.
type Sanitized struct{ Msg any }

// LogValue implements slog.LogValuer.
func (s Sanitized) LogValue() slog.Value {
	if s.Msg == nil {
		return slog.StringValue("")
	}
	return slog.StringValue(protosanitizer.StripSecrets(s.Msg).String())
}
