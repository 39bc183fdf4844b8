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

// retryPause is the pause before asking an instance again that refused
// with a retry-after of after (its admission control): a uniform pick in
// [after, 1.5×after), so that the clients it turned away together come
// back spread out. u is a uniform random number in [0, 1).
func retryPause(after time.Duration, u float64) time.Duration {
	return after + time.Duration(u*float64(after)/2)
}
