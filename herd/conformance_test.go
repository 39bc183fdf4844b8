package herd

import (
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane/dataplanetest"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestConformance runs the mode conformance suite (dataplanetest).
func TestConformance(t *testing.T) {
	dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeHERD, Start: Start, Shape: shape})
}

// shape: herd takes a UC write QP (ConnQPs) per UD answer QP (QPs).
func shape(addr verbs.Address, qpn verbs.QPN, n int) handshake.Admission {
	return handshake.Admission{ConnQPs: dataplanetest.Endpoints(addr, qpn, n),
		QPs: dataplanetest.Endpoints(addr, qpn+0x8000, n)}
}
