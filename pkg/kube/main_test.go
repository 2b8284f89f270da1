package kube

import (
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain silences client-go's klog output: the Forbidden test makes the
// reflector log every failed list.
func TestMain(m *testing.M) {
	klog.SetSlogLogger(quiet)
	os.Exit(m.Run())
}
