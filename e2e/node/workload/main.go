// Command workload is e2e-node's test workload, run as a container by a
// real kubelet: it writes a file on its volume, reads it back, and keeps
// reading it every second until it is stopped, logging each failure, so a
// volume that stops working shows in the container's log and its exit.
// With -check it only reads the file (another pod that mounts the same
// volume later). Built static into an image by `make node-images`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	file := flag.String("file", "/data/hello", "the file on the volume")
	content := flag.String("content", os.Getenv("POD_NAME"), "what the file holds (default: $POD_NAME)")
	check := flag.Bool("check", false, "only read the file, do not write it")
	flag.Parse()
	if !*check {
		if err := write(*file, *content); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %s: %q\n", *file, *content)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	failing := false
	for {
		got, err := os.ReadFile(*file)
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "workload: read:", err)
			failing = true
		case string(got) != *content:
			fmt.Fprintf(os.Stderr, "workload: %s holds %q, want %q\n", *file, got, *content)
			failing = true
		case failing:
			fmt.Printf("read %s again\n", *file)
			failing = false
		}
		select {
		case <-sig:
			return
		case <-tick.C:
		}
	}
}

func write(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(got) != content {
		return fmt.Errorf("%s reads back %q, want %q", path, got, content)
	}
	return nil
}
