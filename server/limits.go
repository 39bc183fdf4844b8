package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/spec"
)

// checkAuth refuses, naming the fix, an admin listener off loopback with
// no credential (anyone reaching it could Advance the counter, switch
// modes or transfer leadership) and pprof off loopback with no token,
// unless -admin-insecure-no-auth accepts that.
func (c *Config) checkAuth() error {
	s := c.Security
	if s.InsecureNoAuth {
		return nil
	}
	if s.TokenFile == "" && strings.TrimSpace(s.AllowIdentities) == "" && !admin.IsLoopbackAddr(c.Admin) {
		return fmt.Errorf("%w: -admin %s is not a loopback address and no credential is configured, so anyone who reaches it could Advance the counter, "+
			"switch modes or transfer leadership. Fix: -admin-token-file FILE (bearer tokens; seqctl -token-file), or -admin-allow IDS with "+
			"-admin-client-ca (mTLS), or listen on loopback (-admin 127.0.0.1:7070); or accept the risk with -admin-insecure-no-auth", ErrConfig, c.Admin)
	}
	if c.Pprof && c.Metrics != "off" && s.TokenFile == "" && !admin.IsLoopbackAddr(c.Metrics) {
		return fmt.Errorf("%w: -pprof on -metrics %s, which is not a loopback address, needs a bearer token: set -admin-token-file FILE "+
			"(pprof then needs \"Authorization: Bearer TOKEN\"), serve metrics on loopback, drop -pprof, or accept the risk with -admin-insecure-no-auth", ErrConfig, c.Metrics)
	}
	return nil
}

// parseAdvanceBudget reads -advance-budget in the format's units: a
// duration for hybrid, a count of values for counter. Empty is 0 (the
// default).
func parseAdvanceBudget(v string, f spec.Format) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	if f == spec.FormatCounter {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("want a positive count of values for -format counter")
		}
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("want a duration of at least 1ms for -format hybrid (e.g. 24h)")
	}
	ms := uint64(d / time.Millisecond)
	if ms > 1<<(64-spec.HybridLogicalBits)-1 {
		return 0, fmt.Errorf("%v is beyond the hybrid format's range", d)
	}
	return ms << spec.HybridLogicalBits, nil
}
