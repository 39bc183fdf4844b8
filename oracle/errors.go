package oracle

import "errors"

// Sentinel errors. Functions wrap them with %w and say what failed, except
// on the hot path (Claim), which returns them bare so as not to allocate.
var (
	// ErrBehind means the claim would cross the persisted mark. The
	// persister has been woken; keep the batch and retry, or wait on
	// MarkAdvanced.
	ErrBehind = errors.New("oracle: claim would cross the persisted mark")
	// ErrBatchSize means a claim asked for fewer than 1 or more than
	// Config.MaxBatch values.
	ErrBatchSize = errors.New("oracle: batch size out of range")
	// ErrClosed means the oracle has been closed.
	ErrClosed = errors.New("oracle: closed")
	// ErrBackward means an operator asked to move the counter backward.
	ErrBackward = errors.New("oracle: refusing to move the counter backward")
	// ErrRange means a value is beyond what the oracle can hand out.
	ErrRange = errors.New("oracle: value out of range")
	// ErrConfig means an invalid Config.
	ErrConfig = errors.New("oracle: invalid config")
	// ErrCorrupt means the persisted mark could not be read back intact.
	ErrCorrupt = errors.New("oracle: mark file corrupt")
	// ErrDataDir means the data directory is missing or unusable.
	ErrDataDir = errors.New("oracle: data directory unusable")
	// ErrNoMark means the store holds no mark. For a FileStore that can
	// be a lost or unmounted volume as well as a new deployment, so the
	// oracle refuses to take it as a fresh start unless told to
	// (Config.Init, or a Config.Floor above every value ever served).
	ErrNoMark = errors.New("oracle: no mark file")
	// ErrLocked means another FileStore, in this process or another, holds
	// the data directory's lock: two oracles on one directory would hand
	// out the same values. The error names the holder.
	ErrLocked = errors.New("oracle: data directory locked by another process")
	// ErrMarkBackward means a store was asked to save a smaller mark than
	// one it saved before.
	ErrMarkBackward = errors.New("oracle: mark would move backward")
)
