//go:build race

package kube

func init() { raceEnabled = true }
