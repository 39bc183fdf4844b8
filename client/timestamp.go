package client

import "github.com/seqd/seqd/spec"

// Timestamp is a value handed out by seqd (spec.Timestamp). In the hybrid
// format its top 46 bits are Unix milliseconds and its low 18 bits a
// logical counter: see Physical and Logical.
type Timestamp = spec.Timestamp
