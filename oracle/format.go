package oracle

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Format says how the oracle's values are laid out.
type Format uint8

const (
	// FormatHybrid puts Unix milliseconds in the high PhysicalBits bits and
	// a logical counter in the low LogicalBits bits. It is the zero value,
	// so the default.
	FormatHybrid Format = iota
	// FormatCounter is a dense counter that starts at 1.
	FormatCounter
)

// Layout of a hybrid value.
const (
	LogicalBits  = 18
	PhysicalBits = 64 - LogicalBits
	MaxLogical   = 1<<LogicalBits - 1
	MaxPhysical  = 1<<PhysicalBits - 1 // Unix milliseconds, about the year 4199
)

// limit is the highest mark the oracle persists. It leaves room above the
// mark so that a concurrent counter-format add never wraps.
const limit = math.MaxUint64 - 1<<32

// ParseFormat parses "hybrid" or "counter" (case-insensitive).
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "hybrid":
		return FormatHybrid, nil
	case "counter":
		return FormatCounter, nil
	}
	return 0, fmt.Errorf("%w %q (want hybrid or counter)", ErrFormat, s)
}

// String returns "hybrid" or "counter".
func (f Format) String() string {
	switch f {
	case FormatHybrid:
		return "hybrid"
	case FormatCounter:
		return "counter"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

func (f Format) valid() bool { return f == FormatHybrid || f == FormatCounter }

// Set implements flag.Value.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (f Format) MarshalText() ([]byte, error) {
	if !f.valid() {
		return nil, fmt.Errorf("%w: %d", ErrFormat, uint8(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, so a Format can sit in
// a JSON or YAML config.
func (f *Format) UnmarshalText(b []byte) error { return f.Set(string(b)) }

// Timestamp is a hybrid value: physical milliseconds and a logical counter.
type Timestamp uint64

// Compose builds a hybrid Timestamp. It clamps physical to
// [0, MaxPhysical] and masks logical to LogicalBits.
func Compose(physicalMs int64, logical uint32) Timestamp {
	return Timestamp(physicalFloor(physicalMs) | uint64(logical)&MaxLogical)
}

// Physical returns the Unix milliseconds part.
func (t Timestamp) Physical() int64 { return int64(uint64(t) >> LogicalBits) }

// Logical returns the logical counter part.
func (t Timestamp) Logical() uint32 { return uint32(uint64(t) & MaxLogical) }

// Time returns the physical part as a time.Time in UTC.
func (t Timestamp) Time() time.Time { return time.UnixMilli(t.Physical()).UTC() }

// String prints the physical part in RFC 3339 with milliseconds and the
// logical part after a plus sign: "2024-08-12T10:00:00.123Z+42".
func (t Timestamp) String() string {
	return fmt.Sprintf("%s+%d", t.Time().Format("2006-01-02T15:04:05.000Z07:00"), t.Logical())
}

// physicalFloor returns now<<LogicalBits, clamping now to [0, MaxPhysical].
func physicalFloor(nowMs int64) uint64 {
	switch {
	case nowMs <= 0:
		return 0
	case nowMs > MaxPhysical:
		return MaxPhysical << LogicalBits
	}
	return uint64(nowMs) << LogicalBits
}
