package oracle

import "math"

// limit is the highest mark the oracle persists. It leaves room above the
// mark so that a concurrent counter-format add never wraps.
const limit = math.MaxUint64 - 1<<32
