package loadgen

import (
	"sync"

	"github.com/seqd/seqd/loadgen/verify"
)

// chunkCalls is the size of one record chunk: 1.5 MiB.
const chunkCalls = 1 << 16

// chunkPool holds record chunks, made and touched before a run so that
// neither allocation nor page faults land in the measurement. Drivers
// take a chunk once per chunkCalls answers; an empty pool allocates (the
// estimate was short), which is counted.
type chunkPool struct {
	mu   sync.Mutex
	free [][]verify.Call
	made int
}

// reserve makes sure the pool holds at least n chunks.
func (p *chunkPool) reserve(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.free) < n {
		p.free = append(p.free, newChunk())
	}
}

func newChunk() []verify.Call {
	c := make([]verify.Call, chunkCalls)
	for j := 0; j < len(c); j += 4096 / 24 {
		c[j].Value = 1 // fault the page in now
	}
	return c[:0]
}

// get returns an empty chunk; fresh reports that it had to be allocated.
func (p *chunkPool) get() (c []verify.Call, fresh bool) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c = p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c, false
	}
	p.made++
	p.mu.Unlock()
	return make([]verify.Call, 0, chunkCalls), true
}

func (p *chunkPool) put(cs [][]verify.Call) {
	p.mu.Lock()
	for _, c := range cs {
		p.free = append(p.free, c[:0])
	}
	p.mu.Unlock()
}
