package nodetopology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFileSize caps what a file rule reads: topology files hold a short name,
// and a rule pointed at a log or a device must not pull it into memory.
const MaxFileSize = 64 << 10

// ErrFileTooLarge is FileInput.Err for a file over MaxFileSize.
var ErrFileTooLarge = errors.New("file is larger than the 64 KiB limit")

// LabelSource fetches the labels of a Node object.
type LabelSource interface {
	NodeLabels(ctx context.Context, nodeName string) (map[string]string, error)
}

// Gather collects Inputs for e from the real environment. It reads only
// what e's rules reference, and only calls src when a rule reads labels, so
// a config without nodeLabel rules needs no API access.
func Gather(ctx context.Context, e *Evaluator, nodeName string, src LabelSource) Inputs {
	in := Inputs{NodeName: nodeName}
	// A failed lookup leaves Hostname empty, which hostname rules report as
	// "hostname is not known".
	in.Hostname, _ = os.Hostname()

	if names := e.EnvNames(); len(names) > 0 {
		in.Env = make(map[string]string, len(names))
		for _, name := range names {
			if v, ok := os.LookupEnv(name); ok {
				in.Env[name] = v
			}
		}
	}

	if paths := e.FilePaths(); len(paths) > 0 {
		in.Files = make(map[string]FileInput, len(paths))
		for _, p := range paths {
			in.Files[p] = readFile(p)
		}
	}

	if e.NeedsLabels() && src != nil {
		labels, err := src.NodeLabels(ctx, nodeName)
		switch {
		case err != nil:
			in.LabelsErr = err
		case labels == nil:
			// The source answered: a node without labels is not the same as
			// no source at all.
			in.Labels = map[string]string{}
		default:
			in.Labels = labels
		}
	}
	return in
}

func readFile(path string) FileInput {
	// Stat first so a FIFO (or other special file) cannot block Open forever.
	fi, err := os.Stat(path)
	if err != nil {
		return FileInput{Err: err}
	}
	switch {
	case fi.IsDir():
		return FileInput{Err: errors.New("is a directory")}
	case !fi.Mode().IsRegular():
		return FileInput{Err: fmt.Errorf("not a regular file (mode %v)", fi.Mode().Type())}
	}
	f, err := os.Open(path)
	if err != nil {
		return FileInput{Err: err}
	}
	defer f.Close()
	// Size from Stat is not trusted: /proc and /sys files report 0.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return FileInput{Err: err}
	}
	if len(data) > MaxFileSize {
		return FileInput{Err: ErrFileTooLarge}
	}
	return FileInput{Content: string(data)}
}
