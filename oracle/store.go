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
	// Config.Floor. A store that decides itself (ha's etcd store, which
	// refuses a missing mark unless its Node was started with -init or
	// -advance) returns 0 for a fresh start it consents to.
	Load(ctx context.Context) (mark uint64, err error)
	// Save makes mark durable and returns only once it is. The oracle
	// never calls Save with a mark smaller than one it saved before.
	Save(ctx context.Context, mark uint64) error
}
