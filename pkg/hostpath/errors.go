package hostpath

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handlers return only gRPC statuses. A plain error reaching gRPC would
// become UNKNOWN, which tells the CO nothing about whether to retry.

func invalidArgument(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func notFound(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

func alreadyExists(format string, args ...any) error {
	return status.Errorf(codes.AlreadyExists, format, args...)
}

func failedPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

func outOfRange(format string, args ...any) error {
	return status.Errorf(codes.OutOfRange, format, args...)
}

func resourceExhausted(format string, args ...any) error {
	return status.Errorf(codes.ResourceExhausted, format, args...)
}

func aborted(format string, args ...any) error {
	return status.Errorf(codes.Aborted, format, args...)
}

func unimplemented(format string, args ...any) error {
	return status.Errorf(codes.Unimplemented, format, args...)
}

// internalError turns a file-system or bookkeeping failure into a status.
// Errors that already are statuses (a cancelled context from keyedLocks or a
// copy) pass through, and context errors keep their meaning
// (DEADLINE_EXCEEDED / CANCELED) so the CO retries instead of giving up.
func internalError(err error, format string, args ...any) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Internal, "%s: %v", fmt.Sprintf(format, args...), err)
}

func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}
