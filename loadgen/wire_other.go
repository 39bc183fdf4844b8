//go:build !linux

package loadgen

import (
	"context"
	"fmt"
	"io"
)

// WireResult is one server at one flow count (Linux only).
type WireResult struct {
	Server          string
	Mode            string
	Flows, Window   int
	Mops            float64
	UserNsPerReq    float64
	SysNsPerReq     float64
	CPUFrom         string
	GenUserNsPerReq float64
	GenSysNsPerReq  float64
	GenBusy         float64
	P50us, P99us    float64
	P999us          float64
	P9999us         float64
	Lost, Stale     uint64
	SpecMisses      uint64
	Violations      uint64
	Checked         int
	ServerDrops     uint64
	AvgBatch        float64
	OfProviderEcho  float64
	OfRawEcho       float64
	AdmitSeconds    float64
	// ServerBytesPerFlow: see the Linux WireResult.
	ServerBytesPerFlow float64
}

func runWire(ctx context.Context, c *Config, rep *Report) error {
	return fmt.Errorf("%w: -engine wire needs Linux", ErrConfig)
}

// ServeFloor needs Linux.
func ServeFloor(kind string, core, depth int, opts string, out io.Writer, stop <-chan struct{}) error {
	return fmt.Errorf("%w: floor servers need Linux", ErrConfig)
}
