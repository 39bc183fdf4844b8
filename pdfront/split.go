package pdfront

import "github.com/seqd/seqd/spec"

// logicalBits is PD's logical width, which is seqd's hybrid format's.
const logicalBits = spec.HybridLogicalBits

// split is the PD form of the range [last-count+1, last]: the first
// value's physical milliseconds, and the logical part of the last value
// counted from that millisecond (above 18 bits when the range crosses a
// millisecond boundary). PD's client composes physical<<18 + logical,
// so every value it derives is the exact seqd value.
func split(last uint64, count int) (physical, logical int64) {
	first := last - uint64(count) + 1
	p := first >> logicalBits
	return int64(p), int64(last - p<<logicalBits)
}

// compose is PD's ComposeTS.
func compose(physical, logical int64) uint64 { return uint64(physical)<<logicalBits + uint64(logical) }
