// Package docref checks that the documentation points at code that exists:
// every test a doc names as proof (`path/x_test.go:TestName`) is defined
// in that file's package, every repository path it links to is there, and
// every link to a heading (file.md#anchor) finds that heading.
// A renamed or deleted test otherwise leaves docs/reliability.md claiming a
// proof that no longer runs. It has no code of its own: the checks are its
// tests (docref_test.go), run with the unit tests (make unit).
package docref
