// Package oracle is seqd's timestamp oracle: it hands out strictly
// increasing 64-bit values in batches, and persists a high-water mark so
// that a restarted oracle never repeats a value.
//
// # Formats
//
// The hybrid format (the default) is the one TiKV PD uses: Unix time in
// milliseconds in the high 46 bits and a logical counter in the low 18
// bits. A claim returns values above the previous value and at or above
// now<<18; when the logical part runs out within a millisecond the values
// simply carry into the next millisecond, because they are plain integers.
// The hot path never sleeps. The counter format is a dense counter that
// starts at 1. Zero is never handed out in either format.
//
// # Invariants
//
//  1. Every value handed out is greater than every value handed out
//     before it, by any goroutine, in this process or an earlier one.
//  2. No value above the persisted mark is ever handed out.
//  3. The persisted mark never moves backward.
//  4. A step of the wall clock backward is counted and never yields a
//     smaller value; the values just run ahead of the clock until it
//     catches up.
//
// # Persist BEFORE hand out
//
// The mark is saved to the Store ahead of use, off the hot path, by a
// background persister: hybrid marks a time window ahead of the clock
// ((now+window)<<18), counter marks a count window ahead of the current
// value. The persister saves when the headroom drops below half the window.
// The Counter learns a new mark (SetMark) only after Store.Save has
// returned, that is after the mark is durable. A claim that would cross the
// mark does not wait: it returns ErrBehind at once, counts a stall and
// wakes the persister. The caller keeps its batch and retries; idle paths
// wait on MarkAdvanced or use ClaimWait.
//
// On start the oracle loads the mark M and raises the counter to M, so the
// first value is above M (and, for hybrid, at or above now<<18). Open saves
// a new mark before it returns, so no claim succeeds before that mark is
// durable. A crash at any moment (kill -9) therefore loses at most unused
// headroom, never uniqueness.
//
// A missing mark is not a fresh start. FileStore cannot tell a new
// deployment from a lost or unmounted volume, so a missing data directory
// or mark file fails Open (ErrDataDir, ErrNoMark), naming the path and the
// recovery, unless the caller says which it is: Config.Init for a new
// deployment, Config.Floor for a recovery above every value served. An
// empty or damaged file is always an error (ErrCorrupt).
//
// # Gate
//
// Config.Gate is asked before every claim. High availability (package ha)
// sets it to the leadership lease, so an oracle whose process may no longer
// be the leader refuses claims at once, before anything else notices.
//
// # Layout
//
// Counter is the pure state machine: atomics and arithmetic, with time
// injected as a clock function, and no goroutines or I/O, so it is
// table-tested deterministically. Oracle is the thin wrapper that owns the
// persister goroutine, the Store, stats and metrics. FileStore is the
// default Store: one small checksummed file in a data directory, replaced
// atomically (write a temp file of its own, fsync, rename, fsync
// directory), never with a mark below the one it holds. A FileStore locks
// its directory (flock on oracle.lock) while open, so that two oracles,
// in one process or two, never serve from one directory.
package oracle
