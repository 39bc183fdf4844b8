package spec

import (
	"fmt"
	"time"
)

// Timestamp is a value handed out by seqd. In the hybrid format its top 46
// bits are Unix milliseconds and its low 18 bits a logical counter.
type Timestamp uint64

// Physical returns the physical part of a hybrid timestamp.
func (t Timestamp) Physical() time.Time { return HybridPhysical(uint64(t)) }

// Logical returns the logical part of a hybrid timestamp.
func (t Timestamp) Logical() uint32 { return HybridLogical(uint64(t)) }

func (t Timestamp) String() string {
	return fmt.Sprintf("%d(%s+%d)", uint64(t), t.Physical().UTC().Format("2006-01-02T15:04:05.000Z"), t.Logical())
}
