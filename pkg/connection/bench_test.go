package connection

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchStore is a store as serve builds it (folder source, the default
// 60-minute cache) with one connection file loaded and cached. Its clock
// is the real one run racyWindow and a second ahead, so the file, written
// just now, reads as old enough to trust: a cache hit then costs what it
// costs in production, a stat and no read.
func benchStore(b *testing.B) *Store {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nfs.yaml"), []byte(connA), 0o600); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	reads := 0
	s := NewStore(Options{
		Folder: dir, CacheTimeout: time.Hour, Log: log,
		Now:    func() time.Time { return time.Now().Add(racyWindow + time.Second) },
		OnLoad: func(string, bool, error) { reads++ },
	})
	if _, err := s.Get(context.Background(), "nfs"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "nfs"); err != nil || reads != 1 {
		b.Fatalf("second Get: %v after %d reads; want a cache hit", err, reads)
	}
	return s
}

// BenchmarkStoreGetHit is the cost every CSI call pays to resolve its
// connection when the file has not changed.
func BenchmarkStoreGetHit(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(context.Background(), "nfs"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreGetHitParallel is the same with concurrent callers, as
// when the CO sends many calls at once: hits must not queue on one lock.
func BenchmarkStoreGetHitParallel(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Get(context.Background(), "nfs"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
