package oracle

import "context"

// Store persists the oracle's high-water mark. It is small so that a
// replicated store (etcd, with leader election) can sit behind it.
type Store interface {
	// Load returns the persisted mark. It must return an error, never 0,
	// when the mark exists but cannot be read. A store that cannot tell a
	// new deployment from a lost mark (FileStore: a missing file may be an
	// unmounted volume) returns an error wrapping ErrNoMark when it holds
	// none; Open takes that as mark 0 only with Config.Init or a
	// Config.Floor. A store that can tell (ha's etcd store, whose group
	// starts empty) returns 0 for a fresh start.
	Load(ctx context.Context) (mark uint64, err error)
	// Save makes mark durable and returns only once it is. The oracle
	// never calls Save with a mark smaller than one it saved before.
	Save(ctx context.Context, mark uint64) error
}
