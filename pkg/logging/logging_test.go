package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRound(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{999, "999ns"},
		{52779 * time.Nanosecond, "52.8µs"},
		{363642 * time.Nanosecond, "364µs"},
		{6334378 * time.Nanosecond, "6.33ms"},
		{18652039 * time.Nanosecond, "18.7ms"},
		{1234567890 * time.Nanosecond, "1.23s"},
		{123456 * time.Millisecond, "2m3s"},
		{-6334378 * time.Nanosecond, "-6.33ms"},
	} {
		if got := Round(tc.in).String(); got != tc.want {
			t.Errorf("Round(%d ns) = %s, want %s", tc.in.Nanoseconds(), got, tc.want)
		}
	}
}

func TestDurations(t *testing.T) {
	var text, js bytes.Buffer
	tl, err := New(&text, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	jl, err := New(&js, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	d := 6334378 * time.Nanosecond
	tl.Info("rpc", "duration", d)
	jl.Info("rpc", "duration", d)

	if !strings.Contains(text.String(), " duration=6.33ms") {
		t.Errorf("text: %q, want duration=6.33ms", text.String())
	}
	var rec map[string]any
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil {
		t.Fatalf("json: %v: %s", err, js.String())
	}
	if got, ok := rec["duration"].(float64); !ok || got != d.Seconds() {
		t.Errorf("json: duration = %#v, want %v (seconds)", rec["duration"], d.Seconds())
	}
}

func TestNewRefusesBadFlags(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "xml", "info"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("format xml: %v, want an error naming --log-format", err)
	}
	if _, err := New(&bytes.Buffer{}, "text", "loud"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("level loud: %v, want an error naming --log-level", err)
	}
}
