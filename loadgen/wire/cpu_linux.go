package wire

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc: USER_HZ, 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// CPU is a process's or thread's CPU time, split into user and kernel.
type CPU struct{ User, Sys time.Duration }

// Sub returns c - o.
func (c CPU) Sub(o CPU) CPU { return CPU{c.User - o.User, c.Sys - o.Sys} }

// Add returns c + o.
func (c CPU) Add(o CPU) CPU { return CPU{c.User + o.User, c.Sys + o.Sys} }

// ReadCPU reads utime and stime from /proc/<pid>/stat, or with tid > 0
// from /proc/<pid>/task/<tid>/stat (pid 0: this process). Resolution:
// one clock tick (10 ms).
func ReadCPU(pid, tid int) (CPU, error) {
	p := "/proc/self"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid)
	}
	if tid > 0 {
		p += "/task/" + strconv.Itoa(tid)
	}
	b, err := os.ReadFile(p + "/stat")
	if err != nil {
		return CPU{}, fmt.Errorf("wire: cpu: %w", err)
	}
	return parseStat(b)
}

// parseStat reads fields 14 and 15 (utime, stime) of a stat line; the
// command name (field 2) may hold spaces and parentheses, so fields are
// counted after its last ')'.
func parseStat(b []byte) (CPU, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return CPU{}, fmt.Errorf("wire: cpu: malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return CPU{}, fmt.Errorf("wire: cpu: malformed stat")
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return CPU{}, fmt.Errorf("wire: cpu: malformed stat")
	}
	return CPU{User: time.Duration(u) * clockTick, Sys: time.Duration(s) * clockTick}, nil
}

// ReadRSS reads the resident memory of process pid (0: this process),
// in bytes: VmRSS of /proc/<pid>/status.
func ReadRSS(pid int) (int64, error) {
	p := "/proc/self/status"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("wire: rss: %w", err)
	}
	return parseRSS(b)
}

// parseRSS reads the VmRSS line (in kB) of a status file.
func parseRSS(b []byte) (int64, error) {
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("wire: rss: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("wire: rss: no VmRSS line")
}
