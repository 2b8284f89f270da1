package csiclient

import (
	"fmt"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes of a command, as scripts rely on them.
const (
	// ExitFailed: the call failed, or its answer could not be printed.
	ExitFailed = 1
	// ExitUsage: the command line is wrong; nothing was called.
	ExitUsage = 2
)

// UsageError is a mistake on the command line, found before any call.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// ExitCode is ExitUsage.
func (e *UsageError) ExitCode() int { return ExitUsage }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// RPCError is a call that failed: "CreateVolume failed:
// RESOURCE_EXHAUSTED: <message>".
type RPCError struct {
	// Method is the RPC, e.g. CreateVolume.
	Method string
	// Err is what the call returned, usually a gRPC status.
	Err error
}

func (e *RPCError) Error() string {
	st := status.Convert(e.Err)
	return fmt.Sprintf("%s failed: %s: %s", e.Method, codeName(st.Code()), st.Message())
}

func (e *RPCError) Unwrap() error { return e.Err }

// ExitCode is ExitFailed.
func (e *RPCError) ExitCode() int { return ExitFailed }

func rpcFailed(method string, err error) error { return &RPCError{Method: method, Err: err} }

// codeName is the code as the CSI spec writes it: RESOURCE_EXHAUSTED.
func codeName(c codes.Code) string { return rpccode.Code(c).String() }

// failure is any other error of a command (an answer that cannot be
// printed): the command failed.
type failure struct{ err error }

func (e *failure) Error() string { return e.err.Error() }
func (e *failure) Unwrap() error { return e.err }
func (e *failure) ExitCode() int { return ExitFailed }
