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
	// ErrMarkBehind: the group's mark in etcd is below this instance's
	// witness (the highest mark it has seen, kept in Config.DataDir): a
	// restored etcd snapshot, or a prefix naming another group. It ends
	// Node.Run as ErrNoMark does; -advance above every value served is
	// the way out.
	ErrMarkBehind = errors.New("ha: etcd's mark is below this instance's witness")
	// ErrWitness: the witness in Config.DataDir cannot be opened, read or
	// written.
	ErrWitness = errors.New("ha: witness")
	// ErrConfig: invalid Config.
	ErrConfig = errors.New("ha: invalid config")
	// ErrNoStandby: a leader transfer was asked for with no standby to take
	// over.
	ErrNoStandby = errors.New("ha: no standby to transfer leadership to")
)
