// Package oracletest provides test doubles for the oracle package: an
// in-memory Store with fault injection and a manual clock.
package oracletest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seqd/seqd/oracle"
)

// MemStore is an in-memory oracle.Store. It records every saved mark, can
// fail saves, and can hold saves until released, so tests can check the
// "persist before hand out" ordering. It is not durable: tests only.
type MemStore struct {
	// BeforeSave, if set, is called at the start of every Save, before
	// the gate and the injected error: tests use it to see attempts.
	BeforeSave func(mark uint64)

	mu      sync.Mutex
	mark    uint64
	saves   []uint64
	err     error
	gate    chan struct{}
	loadErr error
}

var _ oracle.Store = (*MemStore)(nil)

// NewMemStore returns a MemStore holding mark.
func NewMemStore(mark uint64) *MemStore { return &MemStore{mark: mark} }

// Load returns the stored mark, or the error set by SetLoadErr.
func (s *MemStore) Load(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mark, s.loadErr
}

// Save stores mark. It waits while a gate is set (Hold), fails with the
// error set by SetErr, and refuses a smaller mark than the stored one.
func (s *MemStore) Save(ctx context.Context, mark uint64) error {
	if s.BeforeSave != nil {
		s.BeforeSave(mark)
	}
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if mark < s.mark {
		return fmt.Errorf("%w: %d below %d", oracle.ErrMarkBackward, mark, s.mark)
	}
	s.mark = mark
	s.saves = append(s.saves, mark)
	return nil
}

// Mark returns the stored mark.
func (s *MemStore) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mark
}

// Saves returns a copy of every mark saved, in order.
func (s *MemStore) Saves() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.saves...)
}

// SetErr makes later saves fail with err (nil to succeed again).
func (s *MemStore) SetErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// SetLoadErr makes Load fail with err.
func (s *MemStore) SetLoadErr(err error) {
	s.mu.Lock()
	s.loadErr = err
	s.mu.Unlock()
}

// Hold makes later saves wait until the returned release function is
// called.
func (s *MemStore) Hold() (release func()) {
	g := make(chan struct{})
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.gate == g {
				s.gate = nil
			}
			s.mu.Unlock()
			close(g)
		})
	}
}

// Clock is a manual clock in Unix milliseconds, safe for concurrent use.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a Clock reading ms.
func NewClock(ms int64) *Clock {
	c := &Clock{}
	c.ms.Store(ms)
	return c
}

// Now returns the clock's reading; pass it as oracle.Config.Clock.
func (c *Clock) Now() int64 { return c.ms.Load() }

// Set sets the reading (backward too).
func (c *Clock) Set(ms int64) { c.ms.Store(ms) }

// Add moves the reading by d milliseconds (negative to step back).
func (c *Clock) Add(d int64) { c.ms.Add(d) }
