package admin

import (
	"context"
	"errors"

	"github.com/seqd/seqd/dataplane"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors a Backend returns, wrapped with %w to say what failed. The server
// maps each to the gRPC status code beside it. They are the error kinds of
// package dataplane, so that a mode's error maps without translation.
var (
	// ErrInvalidArgument: the request is malformed in a way only the
	// backend can see (InvalidArgument).
	ErrInvalidArgument = dataplane.ErrInvalidArgument
	// ErrUnavailable: the data plane cannot serve right now, for example
	// while it recovers or is not the leader; retrying later may work
	// (Unavailable).
	ErrUnavailable = dataplane.ErrUnavailable
	// ErrNoCapacity: no queue pairs, sessions or window are left to grant
	// (ResourceExhausted).
	ErrNoCapacity = dataplane.ErrNoCapacity
	// ErrUnknownSession: the session ID names no live session (NotFound).
	ErrUnknownSession = dataplane.ErrUnknownSession
	// ErrFailedPrecondition: the request is valid but the server is not in
	// a state to honour it, for example a mode it is not running
	// (FailedPrecondition).
	ErrFailedPrecondition = dataplane.ErrFailedPrecondition
)

// statusError turns err from a Backend into a gRPC status error. Sentinels of
// this package map to their codes, context errors to Canceled and
// DeadlineExceeded, errors that already carry a status pass through, and
// anything else is Internal. It returns nil for nil.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range errorCodes {
		if errors.Is(err, m.err) {
			return status.Error(m.code, err.Error())
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	return status.Error(codes.Internal, err.Error())
}

var errorCodes = [...]struct {
	err  error
	code codes.Code
}{
	{ErrInvalidArgument, codes.InvalidArgument},
	{ErrUnavailable, codes.Unavailable},
	{ErrNoCapacity, codes.ResourceExhausted},
	{ErrUnknownSession, codes.NotFound},
	{ErrFailedPrecondition, codes.FailedPrecondition},
}
