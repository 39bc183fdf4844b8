//go:build race

package e2e

// raceEnabled: the race detector slows every goroutine several-fold, so
// throughput comparisons get a looser bound (they are still reported).
const raceEnabled = true
