package client

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Calls wrap them with what happened: test them with
// errors.Is, never with ==.
var (
	// ErrNotConnected: the client is closed or never connected.
	ErrNotConnected = errors.New("client: not connected")
	// ErrUnavailable: the server cannot be reached (admin plane down,
	// reconnect failed).
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrTimeout: no acceptable answer before the request's deadline.
	// It matches context.DeadlineExceeded too: errors.Is(err,
	// context.DeadlineExceeded) holds for every ErrTimeout.
	ErrTimeout error = timeoutError{}
	// ErrRegression: the server answered a value not above one this
	// client returned before the call began. The value is not handed out.
	ErrRegression = errors.New("client: server answered a value that would go backwards")
	// ErrConfig: an invalid option.
	ErrConfig = errors.New("client: invalid option")
	// ErrUnsupported: the server's mode cannot serve the call
	// (GetRange in a mode whose request asks for one value).
	ErrUnsupported = errors.New("client: not supported by the server's mode")
)

// timeoutError is ErrTimeout: a deadline passed, so it is also
// context.DeadlineExceeded.
type timeoutError struct{}

func (timeoutError) Error() string { return "client: timed out" }

func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// ctxError is the error of a call whose context ended first: ErrTimeout
// for a deadline, the context's error (context.Canceled) otherwise.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("client: call abandoned: %w", err)
}
