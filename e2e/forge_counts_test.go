package e2e

import "github.com/seqd/seqd/client"

// victimDrops is what the victim counted between two snapshots: answers
// its source check dropped, and packets its provider dropped for a wrong
// Q_Key.
func victimDrops(before, after client.Stats) (forged, badQKey uint64) {
	return after.Forged - before.Forged, after.BadQKey - before.BadQKey
}
