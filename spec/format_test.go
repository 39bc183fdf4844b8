package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestFormatAndTimestamp(t *testing.T) {
	for _, s := range []string{"hybrid", "counter", " Counter "} {
		f, err := ParseFormat(s)
		if err != nil || f.String() != strings.ToLower(strings.TrimSpace(s)) {
			t.Errorf("ParseFormat(%q) = %v, %v", s, f, err)
		}
	}
	if _, err := ParseFormat("tso"); !errors.Is(err, ErrFormat) {
		t.Errorf("ParseFormat(tso) = %v", err)
	}
	var f Format
	if err := f.UnmarshalText([]byte("counter")); err != nil || f != FormatCounter {
		t.Errorf("UnmarshalText: %v %v", f, err)
	}
	if _, err := Format(0).MarshalText(); !errors.Is(err, ErrFormat) {
		t.Errorf("MarshalText(0) = %v, want ErrFormat", err)
	}
	ts := Timestamp(HybridValue(1723456789012, 42))
	if ts.Physical().UnixMilli() != 1723456789012 || ts.Logical() != 42 || uint64(ts) != 1723456789012<<18|42 {
		t.Errorf("HybridValue = %d", uint64(ts))
	}
	if got, want := ts.String(), "451793856498761770(2024-08-12T09:59:49.012Z+42)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if HybridValue(-1, 1<<18+3) != 3 || Timestamp(HybridValue(1<<50, 0)).Physical().UnixMilli() != HybridMaxPhysical {
		t.Error("HybridValue does not clamp")
	}
}
