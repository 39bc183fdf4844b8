package loadgen

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRedisReference drives a private redis-server with the pipelined
// INCR client (every reply checked to increase); skipped without
// redis-server.
func TestRedisReference(t *testing.T) {
	s, err := startRedis(context.Background())
	if errors.Is(err, ErrNoRedisServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	var phases []bool
	ops, err := driveRedis(context.Background(), s.addr, 50*time.Millisecond, 200*time.Millisecond, func(b bool) { phases = append(phases, b) })
	if err != nil {
		t.Fatal(err)
	}
	if ops <= 0 || len(phases) != 2 || !phases[0] || phases[1] {
		t.Fatalf("ops %v, phases %v", ops, phases)
	}
}
