package server

import (
	"testing"

	"github.com/seqd/seqd/headeronly"
)

// TestReceiveQuotaDefaults: -peer-max-recv and -identity-max-recv
// default to a quarter of all workers' receive budget; negative (no
// limit) and explicit values are kept, and reach the admin server's
// quotas.
func TestReceiveQuotaDefaults(t *testing.T) {
	for _, tc := range []struct {
		workers, peer, ident, wantPeer, wantIdent int
	}{
		{0, 0, 0, headeronly.DefaultMaxRecv / 4, headeronly.DefaultMaxRecv / 4},
		{4, 0, 0, headeronly.DefaultMaxRecv, headeronly.DefaultMaxRecv},
		{2, -1, 100, -1, 100},
	} {
		c := Config{Workers: tc.workers, PeerMaxRecv: tc.peer, IdentityMaxRecv: tc.ident, Data: t.TempDir()}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		peer, ident := c.quotas()
		if peer.MaxRecv != tc.wantPeer || ident.MaxRecv != tc.wantIdent {
			t.Errorf("workers %d, -peer-max-recv %d, -identity-max-recv %d: quotas %d and %d, want %d and %d",
				tc.workers, tc.peer, tc.ident, peer.MaxRecv, ident.MaxRecv, tc.wantPeer, tc.wantIdent)
		}
	}
}
