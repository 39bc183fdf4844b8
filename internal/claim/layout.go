package claim

import "github.com/seqd/seqd/spec"

// MaxClaim bounds the values of one oracle claim of a batch of ranged
// requests (the oracle's default MaxBatch is 1<<16): a batch whose
// counts add up to more is claimed in several claims.
const MaxClaim = 1 << 15

// MaxRetries bounds the claims that place nothing (a request found every
// fresh claim straddling a millisecond, which takes other workers
// claiming in between): the requests left get no values, and their
// clients resend them.
const MaxRetries = 3

// Layout gives each request of reqs (ranged: fasst, erpc) the first of
// its k values, from claims of at most MaxClaim values (claim returns
// the first of n consecutive values claimed, or false, counted by the
// claimer, when the oracle refused). ref returns a request's k and where
// its first value goes. Requests are placed in order at consecutive
// offsets of a claim; in the hybrid format a request for k > 1 values
// that would span a millisecond boundary starts at the boundary instead
// (spec.HybridMillisecond: every request's values share one
// millisecond), and the values skipped are never handed out. Requests
// that do not fit in what is left of a claim go into the next one.
//
// It returns how many requests, a prefix of reqs, got values: the rest
// (the oracle refused, or MaxRetries claims in a row placed nothing)
// are not answered. retried reports claims that placed nothing.
//
// It is pure: no I/O, no clock; claim is the only way out.
func Layout[R any](reqs []R, ref func(*R) (k int, first *uint64), hybrid bool, claim func(n int) (uint64, bool)) (placed, retried int) {
	i := 0
	for i < len(reqs) {
		n, j := 0, i
		for j < len(reqs) {
			k, _ := ref(&reqs[j])
			if j > i && n+k > MaxClaim {
				break
			}
			n += k
			j++
		}
		v, ok := claim(n)
		if !ok {
			return i, retried
		}
		end, from := v+uint64(n), i
		for i < j {
			k, first := ref(&reqs[i])
			if hybrid && spec.CrossesMillisecond(v, k) {
				v = (v>>spec.HybridLogicalBits + 1) << spec.HybridLogicalBits
			}
			if v+uint64(k) > end {
				break
			}
			*first = v
			v += uint64(k)
			i++
		}
		if i == from {
			if retried++; retried >= MaxRetries {
				return i, retried
			}
		}
	}
	return i, retried
}
