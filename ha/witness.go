package ha

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/seqd/seqd/oracle"
)

// WitnessDirName is the directory, inside an HA instance's data directory
// (Config.DataDir, -data), that holds its witness: an oracle mark file
// (oracle.MarkFileName, the same 24-byte checksummed format a single seqd
// keeps its mark in) with the highest group mark this instance has seen,
// and the lock (oracle.LockFileName) that keeps a second process off the
// directory.
const WitnessDirName = "ha"

// ClusterFileName is the file, next to the witness's mark, that records
// the ID of the etcd cluster the mark was last read from.
const ClusterFileName = "etcd.cluster"

// Witness is an HA instance's local memory of the group's mark: the
// highest mark it has loaded from etcd, saved there, or watched being
// written there by another instance, kept durable in its data directory.
// Every value the group has served is below a mark some leader saved,
// and each leader witnesses its own saves before it serves from them, so
// a mark in etcd below the witness of any instance means etcd lost marks
// (a restored snapshot) or the instance is pointed at another group: a
// term that loads it refuses to serve (ErrMarkBehind) instead of serving
// values again.
//
// A Witness is safe for concurrent use.
type Witness struct {
	fs      *oracle.FileStore
	dir     string
	cluster string // path of ClusterFileName

	mu        sync.Mutex
	mark      uint64
	has       bool   // a mark was read or written
	clusterID uint64 // 0: none recorded
}

// OpenWitness opens (creating it when missing) the witness under dataDir
// and locks it: a second process on the same directory gets an error
// wrapping oracle.ErrLocked, naming the first. A witness that exists but
// does not read back is an error: this instance cannot tell what it has
// seen.
func OpenWitness(dataDir string) (*Witness, error) {
	dir := filepath.Join(dataDir, WitnessDirName)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrWitness, dir, err)
	}
	st, err := oracle.OpenFileStore(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWitness, dir, err)
	}
	w := &Witness{fs: st, dir: dir, cluster: filepath.Join(dir, ClusterFileName)}
	m, err := st.Load(context.Background())
	switch {
	case err == nil:
		w.mark, w.has = m, true
	case errors.Is(err, oracle.ErrNoMark):
		// A fresh data directory: the first mark seen is taken as is.
	default:
		st.Close()
		return nil, fmt.Errorf("%w: %w; it is this instance's memory of the group's mark: "+
			"move %s aside only after checking that the group's mark in etcd is current (the instance then trusts it, "+
			"as a fresh data directory does), or restart with -advance above every value the group served", ErrWitness, err, st.Path())
	}
	if b, err := os.ReadFile(w.cluster); err == nil {
		if id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64); err == nil {
			w.clusterID = id
		}
	}
	return w, nil
}

// Mark returns the witnessed mark and whether there is one.
func (w *Witness) Mark() (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mark, w.has
}

// Path is the witness's mark file.
func (w *Witness) Path() string { return w.fs.Path() }

// Raise makes m the witnessed mark when it is above the current one (or
// there is none yet), durably (fsync) before it returns.
func (w *Witness) Raise(m uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.has && m <= w.mark {
		return nil
	}
	if err := w.fs.Save(context.Background(), m); err != nil {
		return fmt.Errorf("%w: recording mark %d in %s: %w", ErrWitness, m, w.fs.Path(), err)
	}
	w.mark, w.has = m, true
	return nil
}

// Cluster records id as the etcd cluster the mark was read from. It
// returns the ID recorded before (0 when none) and whether it differs.
// A failure to record is returned but harmless: the cluster ID only warns.
func (w *Witness) Cluster(id uint64) (prev uint64, changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev = w.clusterID
	if id == 0 || id == prev {
		return prev, false, nil
	}
	tmp := w.cluster + ".tmp"
	if err := writeFileSync(tmp, []byte(strconv.FormatUint(id, 16)+"\n")); err != nil {
		return prev, prev != 0, err
	}
	if err := os.Rename(tmp, w.cluster); err != nil {
		os.Remove(tmp)
		return prev, prev != 0, err
	}
	w.clusterID = id
	return prev, prev != 0, nil
}

// Close releases the directory's lock.
func (w *Witness) Close() error { return w.fs.Close() }

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
