package spec

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Format is how the 64 bits of a value are laid out. The zero value is no
// format: a configuration that leaves it zero means FormatHybrid.
type Format uint8

// Formats.
const (
	// FormatHybrid: the top HybridPhysicalBits bits are Unix
	// milliseconds, the low HybridLogicalBits bits a logical counter
	// within the millisecond.
	FormatHybrid Format = iota + 1
	// FormatCounter: a plain counter.
	FormatCounter
)

// ErrFormat reports an unknown format name.
var ErrFormat = errors.New("spec: unknown format")

// Hybrid layout.
const (
	HybridLogicalBits  = 18
	HybridLogicalMask  = 1<<HybridLogicalBits - 1
	HybridPhysicalBits = 64 - HybridLogicalBits
	// HybridMaxPhysical is the largest physical part: Unix milliseconds,
	// about the year 4199.
	HybridMaxPhysical = 1<<HybridPhysicalBits - 1
)

func (f Format) String() string {
	switch f {
	case FormatHybrid:
		return "hybrid"
	case FormatCounter:
		return "counter"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Valid reports whether f is one of the formats.
func (f Format) Valid() bool { return f == FormatHybrid || f == FormatCounter }

// ParseFormat parses a format name as String prints it (case and
// surrounding space do not matter).
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "hybrid":
		return FormatHybrid, nil
	case "counter":
		return FormatCounter, nil
	}
	return 0, fmt.Errorf("%w %q (want hybrid or counter)", ErrFormat, s)
}

// MarshalText implements encoding.TextMarshaler.
func (f Format) MarshalText() ([]byte, error) {
	if !f.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrFormat, uint8(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, so a Format can sit in
// a JSON or YAML config.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// HybridPhysical returns the physical part of a hybrid value.
func HybridPhysical(v uint64) time.Time { return time.UnixMilli(int64(v >> HybridLogicalBits)) }

// HybridLogical returns the logical part of a hybrid value.
func HybridLogical(v uint64) uint32 { return uint32(v & HybridLogicalMask) }

// HybridValue builds a hybrid value: ms clamped to [0,
// HybridMaxPhysical], logical masked to HybridLogicalBits.
func HybridValue(ms int64, logical uint32) uint64 {
	return HybridFloor(ms) | uint64(logical&HybridLogicalMask)
}

// HybridFloor is the first hybrid value of millisecond ms (clamped to
// [0, HybridMaxPhysical]).
func HybridFloor(ms int64) uint64 {
	switch {
	case ms <= 0:
		return 0
	case ms > HybridMaxPhysical:
		return HybridMaxPhysical << HybridLogicalBits
	}
	return uint64(ms) << HybridLogicalBits
}

// Timestamp is a value handed out by seqd. In the hybrid format its top
// 46 bits are Unix milliseconds and its low 18 bits a logical counter.
type Timestamp uint64

// Physical returns the physical part of a hybrid timestamp.
func (t Timestamp) Physical() time.Time { return HybridPhysical(uint64(t)) }

// Logical returns the logical part of a hybrid timestamp.
func (t Timestamp) Logical() uint32 { return HybridLogical(uint64(t)) }

// String prints the value and, read as hybrid, its physical part in RFC
// 3339 with milliseconds and its logical part after a plus sign:
// "7234...(2024-08-12T09:59:49.012Z+42)".
func (t Timestamp) String() string {
	return fmt.Sprintf("%d(%s+%d)", uint64(t), t.Physical().UTC().Format("2006-01-02T15:04:05.000Z"), t.Logical())
}
