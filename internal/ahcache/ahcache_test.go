package ahcache_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

// TestRefCountAndGrace: one handle per address, shared by its users; it
// outlives its last user by the grace period, is reused within it, and
// is closed after it.
func TestRefCountAndGrace(t *testing.T) {
	dev, err := verbs.Open("soft", "127.0.0.1:0", nil)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	c := ahcache.New(pd, time.Second)
	defer c.Close()
	a := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2")), Port: 4791}
	b := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.3")), Port: 4791}
	t0 := time.Unix(1000, 0)
	h1, err := c.Get(a, t0)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := c.Get(a, t0)
	if h1 != h2 || c.Len() != 1 {
		t.Fatalf("two handles for one address (len %d)", c.Len())
	}
	if _, err := c.Get(b, t0); err != nil || c.Len() != 2 {
		t.Fatalf("second address: len %d, %v", c.Len(), err)
	}
	c.Put(a, t0)
	c.Reap(t0.Add(time.Hour))
	if c.Len() != 2 {
		t.Fatalf("a handle still in use was reaped (len %d)", c.Len())
	}
	c.Put(a, t0)
	c.Reap(t0.Add(time.Second / 2))
	if c.Len() != 2 {
		t.Fatal("reaped within the grace period")
	}
	if h3, _ := c.Get(a, t0.Add(time.Second/2)); h3 != h1 {
		t.Fatal("a handle within its grace period was not reused")
	}
	c.Put(a, t0.Add(time.Second/2))
	c.Put(b, t0)
	c.Reap(t0.Add(2 * time.Second))
	if c.Len() != 0 {
		t.Fatalf("%d handles after the grace period, want 0", c.Len())
	}
	c.Put(a, t0) // an extra Put is harmless
	if c.Len() != 0 {
		t.Fatal("Put of an unknown address created an entry")
	}
}
