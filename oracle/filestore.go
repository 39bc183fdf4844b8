package oracle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MarkFileName is the name of the mark file inside a FileStore's directory.
const MarkFileName = "oracle.mark"

// LockFileName is the name of the lock file inside a FileStore's
// directory. The FileStore holds an exclusive flock on it for as long as it
// is open, and writes its holder (pid, host, start time) into it so that a
// second opener can name the first.
const LockFileName = "oracle.lock"

const (
	markTempName    = MarkFileName + ".tmp" // prefix of every temp file; alone, the name seqd used before the lock
	markProbeName   = MarkFileName + ".probe"
	markMagic       = "SEQDMARK"
	markVersion     = 1
	markFileSize    = 24 // magic 8, version 2, reserved 2, mark 8, crc32c 4
	markCRCOffset   = markFileSize - 4
	recoveryAdvice  = "refusing to guess a starting value: restore the file from a backup, or move it aside and restart with Config.Floor above every value this oracle ever served (for hybrid, a mark is at most the window ahead of the clock at the time it was saved)"
	missingAdvice   = "refusing to take a missing mark for a fresh start (the data volume may be lost or not mounted): restore the file from a backup, or start with Config.Floor above every value this oracle ever served; only a new deployment starts with Config.Init"
	markFilePerm    = 0o644
	markDirSyncMode = os.O_RDONLY
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeMarkFile returns the mark file for mark. Layout, little-endian:
//
//	0  magic "SEQDMARK"
//	8  version uint16 (1)
//	10 reserved uint16 (0)
//	12 mark uint64
//	20 CRC-32C of bytes 0..19
func encodeMarkFile(mark uint64) []byte {
	b := make([]byte, markFileSize)
	copy(b, markMagic)
	binary.LittleEndian.PutUint16(b[8:], markVersion)
	binary.LittleEndian.PutUint64(b[12:], mark)
	binary.LittleEndian.PutUint32(b[markCRCOffset:], crc32.Checksum(b[:markCRCOffset], castagnoli))
	return b
}

// decodeMarkFile parses a mark file. Every failure wraps ErrCorrupt.
func decodeMarkFile(b []byte) (uint64, error) {
	switch {
	case len(b) == 0:
		return 0, fmt.Errorf("%w: empty (0 of %d bytes)", ErrCorrupt, markFileSize)
	case len(b) < markFileSize:
		return 0, fmt.Errorf("%w: truncated: %d of %d bytes", ErrCorrupt, len(b), markFileSize)
	case len(b) > markFileSize:
		return 0, fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(b), markFileSize)
	case string(b[:8]) != markMagic:
		return 0, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != markVersion {
		return 0, fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	want := binary.LittleEndian.Uint32(b[markCRCOffset:])
	if got := crc32.Checksum(b[:markCRCOffset], castagnoli); got != want {
		return 0, fmt.Errorf("%w: checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	if r := binary.LittleEndian.Uint16(b[10:]); r != 0 {
		return 0, fmt.Errorf("%w: reserved field %#x", ErrCorrupt, r)
	}
	return binary.LittleEndian.Uint64(b[12:]), nil
}

// FileStore keeps the mark in one file in a data directory. Save writes a
// temp file of its own, fsyncs it, renames it over the mark file and fsyncs
// the directory, so the file is always either the old mark or the new one.
//
// One FileStore owns a directory: OpenFileStore takes an exclusive lock on
// LockFileName and holds it until Close (or the process exits), so a second
// seqd on the same directory refuses to start (ErrLocked) instead of
// serving the same values as the first.
type FileStore struct {
	dir  string
	path string
	lock *dirLock

	mu     sync.Mutex
	saved  uint64
	closed bool
}

var _ Store = (*FileStore)(nil)

// OpenFileStore opens a FileStore in dir, which must exist: a missing data
// directory is more likely an unmounted volume than a fresh start (InitDir
// creates it for a new deployment). It locks the directory (ErrLocked,
// naming the holder, when another FileStore, in this process or another,
// has it), checks that the directory is writable (and fsyncable) by
// writing a probe file, removes temp files left by a crash, and reads the
// stored mark, if any, so that no Save goes below it. Close releases the
// lock.
func OpenFileStore(dir string) (*FileStore, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (fix the path, mount the volume or restore it from a backup; only a new deployment creates it, with Config.Init)", ErrDataDir, dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrDataDir, dir)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := &FileStore{dir: dir, path: filepath.Join(dir, MarkFileName), lock: lock}
	if err := s.prepare(); err != nil {
		lock.release()
		return nil, err
	}
	return s, nil
}

// prepare runs OpenFileStore's checks once the directory is locked: only
// then are temp files in it certainly nobody's.
func (s *FileStore) prepare() error {
	dir := s.dir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDataDir, dir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), markTempName) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: %s: removing stale temp file: %w", ErrDataDir, dir, err)
			}
		}
	}
	probe := filepath.Join(dir, markProbeName)
	if err := writeSync(probe, []byte("probe\n")); err != nil {
		return fmt.Errorf("%w: %s is not writable: %w", ErrDataDir, dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("%w: %s: removing probe file: %w", ErrDataDir, dir, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDataDir, dir, err)
	}
	// A mark that reads back is a floor for every Save, Load or not. A
	// missing or damaged one is Load's to report.
	if m, err := s.stored(); err == nil {
		s.saved = m
	}
	return nil
}

// Close releases the directory's lock. Later Saves fail. Close is
// idempotent.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.release()
}

// stored reads the mark file: its mark, 0 and nil when there is none, or
// an error wrapping ErrCorrupt.
func (s *FileStore) stored() (uint64, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("oracle: reading mark file %s: %w", s.path, err)
	}
	m, err := decodeMarkFile(b)
	if err != nil {
		return 0, fmt.Errorf("oracle: mark file %s: %w", s.path, err)
	}
	return m, nil
}

// InitDir prepares dir for a new deployment: it creates dir, and its
// parents, when missing. It never touches a mark file; Open with
// Config.Init calls it and then takes a missing mark file (ErrNoMark) as
// mark 0.
func InitDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("%w: creating %s: %w", ErrDataDir, dir, err)
	}
	return nil
}

// Path returns the mark file's path.
func (s *FileStore) Path() string { return s.path }

// Load reads the mark. A missing file is an error wrapping ErrNoMark, never
// mark 0: it may be a lost volume rather than a fresh start, and only the
// caller can know (Config.Init). A corrupt, truncated or empty one is an
// error that wraps ErrCorrupt. Both name the path and say how to recover.
func (s *FileStore) Load(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %s does not exist; %s", ErrNoMark, s.path, missingAdvice)
	}
	if err != nil {
		return 0, fmt.Errorf("oracle: reading mark file %s: %w", s.path, err)
	}
	m, err := decodeMarkFile(b)
	if err != nil {
		return 0, fmt.Errorf("oracle: mark file %s: %w; %s", s.path, err, recoveryAdvice)
	}
	s.mu.Lock()
	s.saved = max(s.saved, m)
	s.mu.Unlock()
	return m, nil
}

// Save makes mark durable. It refuses, with ErrMarkBackward, a mark below
// one it saved or loaded before or below the one the file holds now (read
// back before every save: nothing, not even a writer that bypassed the
// lock, moves the stored mark backward through this store); and, with
// ErrCorrupt, to overwrite a mark file it cannot read. Each save writes a
// temp file of its own (os.CreateTemp), so no two writers ever share one.
// The fsyncs are not interruptible, so ctx is checked only before
// starting.
func (s *FileStore) Save(ctx context.Context, mark uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return fmt.Errorf("oracle: saving mark %d: %w", mark, ErrClosed)
	}
	if mark < s.saved {
		return fmt.Errorf("%w: %d below saved %d", ErrMarkBackward, mark, s.saved)
	}
	cur, err := s.stored()
	if err != nil {
		return fmt.Errorf("oracle: saving mark %d: refusing to overwrite a mark that does not read back: %w", mark, err)
	}
	if mark < cur {
		s.saved = cur
		return fmt.Errorf("%w: %d below the stored %d in %s (written by another process?)", ErrMarkBackward, mark, cur, s.path)
	}
	tmp, err := writeTemp(s.dir, encodeMarkFile(mark))
	if err != nil {
		return fmt.Errorf("oracle: saving mark: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("oracle: saving mark: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("oracle: saving mark: %w", err)
	}
	s.saved = mark
	return nil
}

// writeTemp writes b to a new, uniquely named temp file in dir, fsyncs it
// and returns its path. It removes the file when it fails.
func writeTemp(dir string, b []byte) (string, error) {
	f, err := os.CreateTemp(dir, markTempName+"-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = f.Chmod(markFilePerm)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// writeSync writes b to a new file at path and fsyncs it.
func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, markFilePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.OpenFile(dir, markDirSyncMode, 0)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return d.Close()
}
