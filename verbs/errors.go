package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Providers wrap them with %w and say what failed.
var (
	ErrNoDevice        = errors.New("verbs: no RDMA device found")
	ErrNoProvider      = errors.New("verbs: unknown provider")
	ErrNotSupported    = errors.New("verbs: operation not supported by this provider")
	ErrInvalidArgument = errors.New("verbs: invalid argument")
	ErrQPState         = errors.New("verbs: operation not allowed in this QP state")
	ErrBadTransition   = errors.New("verbs: invalid QP state transition")
	ErrQueueFull       = errors.New("verbs: work queue full")
	ErrClosed          = errors.New("verbs: resource closed")
	ErrBusy            = errors.New("verbs: resource still in use")
	ErrCQOverrun       = errors.New("verbs: completion queue overrun")
	ErrDeadline        = errors.New("verbs: send deadline passed")
)

// WCError is the error of a failed work completion.
type WCError struct {
	Status WCStatus
	ID     uint64
}

func (e *WCError) Error() string {
	return fmt.Sprintf("verbs: work request %d: %s", e.ID, e.Status)
}
