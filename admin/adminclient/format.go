package adminclient

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/seqd/seqd/spec"
)

// Values and steps for a person: the admin plane carries raw 64-bit
// values (StatusResponse.current, persisted_mark, AdvanceRequest.min),
// which mean a time in the hybrid format and a count in the counter
// format. seqctl prints them with these, and the server's Advance
// refusals use Step, so that both read the same.

// Value renders v as the server's format f reads it: in hybrid the
// physical time in RFC 3339 with milliseconds and the logical part after
// a plus sign ("2026-11-28T01:50:34.708Z+3"), in counter the number.
func Value(f spec.Format, v uint64) string {
	if f != spec.FormatHybrid {
		return strconv.FormatUint(v, 10)
	}
	s := spec.HybridPhysical(v).UTC().Format("2006-01-02T15:04:05.000Z")
	if l := spec.HybridLogical(v); l > 0 {
		s += "+" + strconv.FormatUint(uint64(l), 10)
	}
	return s
}

// Step renders the distance d between two values of format f: in hybrid a
// duration of the physical part ("1m0s", "under 1ms (5 logical values)"),
// in counter a count of values.
func Step(f spec.Format, d uint64) string {
	if f != spec.FormatHybrid {
		if d == 1 {
			return "1 value"
		}
		return fmt.Sprintf("%d values", d)
	}
	ms := d >> spec.HybridLogicalBits
	switch {
	case ms == 0 && d > 0:
		return fmt.Sprintf("under 1ms (%d logical values)", d)
	case ms > uint64(math.MaxInt64/int64(time.Millisecond)):
		return fmt.Sprintf("%d days", ms/uint64(24*time.Hour/time.Millisecond))
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// ParseValue reads a value as an operator writes one for a server of
// format f, relative to cur (the server's current value) where it says
// so:
//
//   - a plain integer (decimal, 0x hex, _ separators): the raw value;
//   - +N (counter) or +DURATION (hybrid, e.g. +1h): that far above cur;
//   - hybrid only, an RFC 3339 time (2026-11-28T02:00:00Z): the first
//     value of that millisecond.
//
// The error says which forms the format takes.
func ParseValue(f spec.Format, s string, cur uint64) (uint64, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 0, 64); err == nil {
		return v, nil
	}
	hybrid := f == spec.FormatHybrid
	want := "want a value (a positive integer) or +N, N values above the current one"
	if hybrid {
		want = "want a time (RFC 3339, e.g. 2026-11-28T02:00:00Z), +DURATION above the current value (e.g. +1h), or a raw value (a positive integer)"
	}
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		var step uint64
		if hybrid {
			d, err := time.ParseDuration(rest)
			if err != nil || d <= 0 {
				return 0, fmt.Errorf("%q: %s", s, want)
			}
			step = uint64(d.Milliseconds()) << spec.HybridLogicalBits
			if d < time.Millisecond {
				step = 1
			}
		} else {
			n, err := strconv.ParseUint(strings.ReplaceAll(rest, "_", ""), 10, 64)
			if err != nil || n == 0 {
				return 0, fmt.Errorf("%q: %s", s, want)
			}
			step = n
		}
		if step > math.MaxUint64-cur {
			return 0, fmt.Errorf("%q: beyond the largest value from the current %s", s, Value(f, cur))
		}
		return cur + step, nil
	}
	if hybrid {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			ms := t.UnixMilli()
			if ms <= 0 || ms > spec.HybridMaxPhysical {
				return 0, fmt.Errorf("%q: outside the hybrid format's times (1970 to about 4199)", s)
			}
			return spec.HybridFloor(ms), nil
		}
	}
	return 0, fmt.Errorf("%q: %s", s, want)
}
