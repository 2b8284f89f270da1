// Package logging builds the process logger (tint for terminals, JSON for
// clusters) and renders CSI messages with their secrets stripped.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
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
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	case "text", "":
		noColor := true
		if f, ok := w.(*os.File); ok {
			noColor = !isatty.IsTerminal(f.Fd())
		}
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, NoColor: noColor, TimeFormat: "15:04:05.000"})), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
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
