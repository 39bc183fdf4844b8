package client

import "time"

// nextBackoff is the pause before the next reconnect after a failed one:
// "decorrelated jitter", a uniform pick between base and three times the
// last pause, capped at limit. Many clients that lost their server at the
// same moment (a restart, a failover) so spread their reconnects instead
// of storming the admin plane in step. u is a uniform random number in
// [0, 1), passed in so that the function stays pure.
func nextBackoff(prev, base, limit time.Duration, u float64) time.Duration {
	hi := min(3*max(prev, base), limit)
	if hi <= base {
		return min(base, limit)
	}
	return base + time.Duration(u*float64(hi-base))
}
