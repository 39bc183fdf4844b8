package erpc

import "github.com/seqd/seqd/spec"

// maxClaim bounds the values of one oracle claim of a burst.
const maxClaim = 1 << 15

// maxRetries bounds the claims that place nothing (in the hybrid format,
// every fresh claim straddled a millisecond): the requests left get no
// values and are aborted.
const maxRetries = 3

// layout gives each request of reqs the first of its k values, from
// claims of at most maxClaim values, as fasst's layout does (in the
// hybrid format a request for k > 1 values that would span a millisecond
// boundary starts at the boundary; the values skipped are never handed
// out). Usually the whole burst is one claim. It returns how many
// requests, a prefix of reqs, got values. It is pure: claim is its only
// way out.
func layout(reqs []pending, hybrid bool, claim func(n int) (uint64, bool)) (placed, retried int) {
	i := 0
	for i < len(reqs) {
		n, j := 0, i
		for j < len(reqs) && (j == i || n+reqs[j].k <= maxClaim) {
			n += reqs[j].k
			j++
		}
		v, ok := claim(n)
		if !ok {
			return i, retried
		}
		end, from := v+uint64(n), i
		for i < j {
			k := reqs[i].k
			if hybrid && spec.CrossesMillisecond(v, k) {
				v = (v>>spec.HybridLogicalBits + 1) << spec.HybridLogicalBits
			}
			if v+uint64(k) > end {
				break
			}
			reqs[i].first = v
			v += uint64(k)
			i++
		}
		if i == from {
			if retried++; retried >= maxRetries {
				return i, retried
			}
		}
	}
	return i, retried
}
