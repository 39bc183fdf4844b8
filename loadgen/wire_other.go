//go:build !linux

package loadgen

import (
	"context"
	"fmt"
)

// WireResult is one server at one flow count (Linux only).
type WireResult struct {
	Server         string
	Flows, Window  int
	Mops           float64
	UserNsPerReq   float64
	SysNsPerReq    float64
	CPUFrom        string
	P50us, P99us   float64
	P999us         float64
	Lost, Stale    uint64
	SpecMisses     uint64
	Violations     uint64
	Checked        int
	OfProviderEcho float64
	OfRawEcho      float64
}

func runWire(ctx context.Context, c *Config, rep *Report) error {
	return fmt.Errorf("%w: -engine wire needs Linux", ErrConfig)
}
