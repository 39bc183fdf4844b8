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
	"sync"
)

// MarkFileName is the name of the mark file inside a FileStore's directory.
const MarkFileName = "oracle.mark"

const (
	markTempName    = MarkFileName + ".tmp"
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
// temp file, fsyncs it, renames it over the mark file and fsyncs the
// directory, so the file is always either the old mark or the new one.
type FileStore struct {
	dir  string
	path string

	mu    sync.Mutex
	saved uint64
}

var _ Store = (*FileStore)(nil)

// OpenFileStore opens a FileStore in dir, which must exist: a missing data
// directory is more likely an unmounted volume than a fresh start (InitDir
// creates it for a new deployment). It checks
// that the directory is writable (and fsyncable) by writing a probe file,
// and removes a temp file left by a crash.
func OpenFileStore(dir string) (*FileStore, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (fix the path, mount the volume or restore it from a backup; only a new deployment creates it, with Config.Init)", ErrDataDir, dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrDataDir, dir)
	}
	s := &FileStore{dir: dir, path: filepath.Join(dir, MarkFileName)}
	if err := os.Remove(filepath.Join(dir, markTempName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: removing stale temp file: %w", ErrDataDir, dir, err)
	}
	probe := filepath.Join(dir, markProbeName)
	if err := writeSync(probe, []byte("probe\n")); err != nil {
		return nil, fmt.Errorf("%w: %s is not writable: %w", ErrDataDir, dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return nil, fmt.Errorf("%w: %s: removing probe file: %w", ErrDataDir, dir, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDataDir, dir, err)
	}
	return s, nil
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

// Save makes mark durable. It refuses a mark below one it saved or loaded
// before, with ErrMarkBackward. The fsyncs are not interruptible, so ctx is
// checked only before starting.
func (s *FileStore) Save(ctx context.Context, mark uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if mark < s.saved {
		return fmt.Errorf("%w: %d below saved %d", ErrMarkBackward, mark, s.saved)
	}
	tmp := filepath.Join(s.dir, markTempName)
	if err := writeSync(tmp, encodeMarkFile(mark)); err != nil {
		os.Remove(tmp)
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
