package ha

import "errors"

// Sentinel errors.
var (
	// ErrNotLeader: this instance is not the leader, or its term has ended.
	// Term.Gate returns it bare, without allocating.
	ErrNotLeader = errors.New("ha: not the leader")
	// ErrMarkNotIncreasing: a save was refused because the stored mark is
	// already at or above the new one.
	ErrMarkNotIncreasing = errors.New("ha: mark does not increase")
	// ErrCorrupt: the stored mark is not a mark.
	ErrCorrupt = errors.New("ha: stored mark corrupt")
	// ErrNoMark: the group's mark key is missing and the Node was not
	// told this is a new group (Config.Init) or a recovery
	// (Config.Advance). It ends Node.Run: the group refuses to serve.
	ErrNoMark = errors.New("ha: no mark in etcd")
	// ErrConfig: invalid Config.
	ErrConfig = errors.New("ha: invalid config")
	// ErrNoStandby: a leader transfer was asked for with no standby to take
	// over.
	ErrNoStandby = errors.New("ha: no standby to transfer leadership to")
)
