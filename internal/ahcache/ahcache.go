// Package ahcache is the servers' cache of UD address handles, one per
// client address, shared by the modes that answer with SENDs (headeronly,
// herd). Handles are reference counted by the admitted client QPs at
// their address; one no longer referenced is closed only a grace period
// after its last reference went, because a worker may still hold it in a
// batch it is answering. So the cache is bounded by the addresses of the
// connected clients plus those that left within the grace period, not by
// every address ever admitted.
//
// A Cache is not safe for concurrent use: its owner calls it under the
// lock that also guards admission.
package ahcache

import (
	"time"

	"github.com/seqd/seqd/verbs"
)

// Grace is the default time a handle outlives its last reference: far
// longer than a worker takes to answer a batch (spec.MaxResidence).
const Grace = time.Second

type ref struct {
	ah     verbs.AH
	refs   int
	unused time.Time // when refs dropped to zero
}

// Cache maps client addresses to reference-counted address handles.
type Cache struct {
	pd    verbs.PD
	grace time.Duration
	m     map[verbs.Address]*ref
	idle  int // entries with no references
}

// New returns an empty cache creating handles on pd; grace 0 means Grace.
func New(pd verbs.PD, grace time.Duration) *Cache {
	if grace <= 0 {
		grace = Grace
	}
	return &Cache{pd: pd, grace: grace, m: map[verbs.Address]*ref{}}
}

// Get returns the handle for a, taking a reference; it first closes the
// handles idle for longer than the grace period.
func (c *Cache) Get(a verbs.Address, now time.Time) (verbs.AH, error) {
	c.Reap(now)
	if r, ok := c.m[a]; ok {
		if r.refs == 0 {
			c.idle--
		}
		r.refs++
		return r.ah, nil
	}
	ah, err := c.pd.CreateAH(verbs.AHAttr{Dest: a, PortNum: 1})
	if err != nil {
		return nil, err
	}
	c.m[a] = &ref{ah: ah, refs: 1}
	return ah, nil
}

// Put drops a reference taken by Get.
func (c *Cache) Put(a verbs.Address, now time.Time) {
	if r, ok := c.m[a]; ok && r.refs > 0 {
		if r.refs--; r.refs == 0 {
			r.unused = now
			c.idle++
		}
	}
}

// Reap closes the handles unreferenced for longer than the grace period.
func (c *Cache) Reap(now time.Time) {
	if c.idle == 0 {
		return
	}
	for a, r := range c.m {
		if r.refs == 0 && now.Sub(r.unused) > c.grace {
			r.ah.Close()
			delete(c.m, a)
			c.idle--
		}
	}
}

// Len is the number of open handles, referenced or within their grace.
func (c *Cache) Len() int { return len(c.m) }

// Close closes every handle.
func (c *Cache) Close() {
	for a, r := range c.m {
		r.ah.Close()
		delete(c.m, a)
	}
	c.idle = 0
}
