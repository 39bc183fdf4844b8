package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
)

// ModeFileName is the file in the data directory, beside the mark, that
// keeps a single instance's data-path mode across restarts: SetMode
// writes it before switching, and seqd starts in the mode it names
// whatever -mode says (-mode is the mode of a new deployment). An HA
// group keeps its mode in etcd instead (package haserve).
const ModeFileName = "seqd.mode"

// loadMode reads the mode kept in dir: ok is false when none was kept.
// A mode file that names no mode in known is an error, never ignored.
func loadMode(dir string, known []string) (mode string, ok bool, err error) {
	path := filepath.Join(dir, ModeFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("seqd: mode file: %w", err)
	}
	mode = strings.TrimSpace(string(b))
	if !slices.Contains(known, mode) {
		return "", false, fmt.Errorf("seqd: mode file %s names %q, not one of %s: fix or remove it (-mode then applies)",
			path, mode, strings.Join(known, ", "))
	}
	return mode, true, nil
}

// saveMode keeps mode in dir atomically and durably: a temporary file,
// fsynced, renamed over the old one, and the directory fsynced.
func saveMode(dir, mode string) error {
	path := filepath.Join(dir, ModeFileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("seqd: save mode: %w", err)
	}
	_, err = f.WriteString(mode + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("seqd: save mode in %s: %w", path, err)
	}
	return nil
}

// SetMode keeps the new mode in the data directory, then switches to it,
// so that a restart comes back in the mode last set.
func (b oracleStatus) SetMode(ctx context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	if b.dir != "" && slices.Contains(b.known, req.GetMode()) {
		if err := saveMode(b.dir, req.GetMode()); err != nil {
			return nil, fmt.Errorf("%w: %v (not switched)", admin.ErrUnavailable, err)
		}
	}
	return b.Switch.SetMode(ctx, req)
}
