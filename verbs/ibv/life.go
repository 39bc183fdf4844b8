package ibv

import (
	"fmt"
	"sync"

	"github.com/seqd/seqd/verbs"
)

// life tracks whether a resource is open and how many resources made from
// it are still open, so that closing a parent before its children is an
// error (as ibv_dealloc_pd and ibv_destroy_cq refuse with EBUSY) rather
// than a use-after-free in C.
type life struct {
	mu       sync.Mutex
	closed   bool
	children int
}

// acquire records a new child; it fails if the parent is closed.
func (l *life) acquire(what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%w: %s", verbs.ErrClosed, what)
	}
	l.children++
	return nil
}

// release forgets a child recorded by acquire.
func (l *life) release() {
	l.mu.Lock()
	l.children--
	l.mu.Unlock()
}

// close marks the resource closed if it has no children. The caller frees
// the resource only when close returns nil.
func (l *life) close(what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%w: %s already closed", verbs.ErrClosed, what)
	}
	if l.children > 0 {
		return fmt.Errorf("%w: %s has %d open resources", verbs.ErrBusy, what, l.children)
	}
	l.closed = true
	return nil
}

// isClosed reports whether close succeeded.
func (l *life) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
