package pdfront

import "github.com/seqd/seqd/spec"

// logicalBits is PD's logical width, which is seqd's hybrid format's.
const logicalBits = spec.HybridLogicalBits

// split is the PD form of the range [last-count+1, last]: the first
// value's physical milliseconds, and the logical part of the last value
// counted from that millisecond. A seqd range in the hybrid format stays
// within one millisecond (client.Range), so the logical part is below
// 2^18; were a range to cross a boundary (the counter format), it would
// be above, and PD's client, composing physical<<18 + logical, would
// still derive every exact seqd value.
func split(last uint64, count int) (physical, logical int64) {
	first := last - uint64(count) + 1
	p := first >> logicalBits
	return int64(p), int64(last - p<<logicalBits)
}

// compose is PD's ComposeTS.
func compose(physical, logical int64) uint64 { return uint64(physical)<<logicalBits + uint64(logical) }
