package client

import "errors"

// Sentinel errors; calls wrap them with what happened.
var (
	// ErrNotConnected: the client is closed or never connected.
	ErrNotConnected = errors.New("client: not connected")
	// ErrUnavailable: the server cannot be reached (admin plane down,
	// reconnect failed).
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrTimeout: no acceptable answer before the request's deadline.
	ErrTimeout = errors.New("client: timed out")
	// ErrRegression: the server answered a value not above one this
	// client returned before the call began. The value is not handed out.
	ErrRegression = errors.New("client: server answered a value that would go backwards")
	// ErrConfig: an invalid option.
	ErrConfig = errors.New("client: invalid option")
)
