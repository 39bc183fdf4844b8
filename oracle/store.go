package oracle

import "context"

// Store persists the oracle's high-water mark. It is small so that a
// replicated store (etcd, with leader election) can sit behind it.
type Store interface {
	// Load returns the persisted mark, or 0 on a fresh start. It must
	// return an error, never 0, when the mark exists but cannot be read.
	Load(ctx context.Context) (mark uint64, err error)
	// Save makes mark durable and returns only once it is. The oracle
	// never calls Save with a mark smaller than one it saved before.
	Save(ctx context.Context, mark uint64) error
}
