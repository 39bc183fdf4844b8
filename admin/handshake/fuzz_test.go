package handshake

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// FuzzDecodeGrant feeds arbitrary bytes, as a Connect request and its
// answer, through protobuf decoding and DecodeGrant. Neither may panic;
// a refusal wraps ErrMismatch or ErrMalformed and returns no grant; a
// grant it returns survives every read a client makes of it (indexed by
// the mode's shape), holds only 24-bit QPNs (never 0) and PSNs, and
// encodes to an answer that decodes to itself. The seeds are a valid
// exchange of every mode.
func FuzzDecodeGrant(f *testing.F) {
	for _, m := range spec.ModeTable {
		req, err := proto.Marshal(EncodeAdmission(validAdmission(2), m.Name))
		if err != nil {
			f.Fatal(err)
		}
		resp, err := proto.Marshal(EncodeGrant(validGrant(m, 2)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(req, resp)
	}
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, reqb, respb []byte) {
		var req adminpb.ConnectRequest
		var resp adminpb.ConnectResponse
		if proto.Unmarshal(reqb, &req) != nil || proto.Unmarshal(respb, &resp) != nil {
			return
		}
		g, err := DecodeGrant(&req, &resp)
		if err != nil {
			if !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused without a kind: %v", err)
			}
			if !reflect.DeepEqual(g, Grant{}) {
				t.Fatalf("refused (%v) but returned %+v", err, g)
			}
			return
		}
		facts, ok := spec.Facts(g.Mode)
		if !ok || (req.GetMode() != "" && g.Mode != req.GetMode()) || resp.GetProtocolVersion() != spec.ProtocolVersion {
			t.Fatalf("accepted mode %q for %q, version %d", g.Mode, req.GetMode(), resp.GetProtocolVersion())
		}
		if w := req.GetWindow(); w != 0 && g.Window > int(w) {
			t.Fatalf("accepted window %d for %d asked", g.Window, w)
		}
		reads(t, facts.Grant, len(req.GetQps()), g)
		for _, eps := range [][]Endpoint{g.ServerQPs, g.ServerConnQPs, g.AnswerQPs} {
			for _, e := range eps {
				if e.QPN == 0 || e.QPN > verbs.MaxQPN {
					t.Fatalf("accepted QPN %d", e.QPN)
				}
			}
		}
		for _, p := range g.ConnPSNs {
			if p > verbs.PSNMask {
				t.Fatalf("accepted PSN %#x", p)
			}
		}
		again, err := DecodeGrant(&req, EncodeGrant(g))
		if err != nil || !reflect.DeepEqual(again, g) {
			t.Fatalf("re-encoded grant decoded to %+v, %v; want %+v", again, err, g)
		}
	})
}

// reads makes the reads of g a client of a mode of shape s with n QPs
// makes (client/<mode>.go's attach): an index out of range panics.
func reads(t *testing.T, s spec.GrantShape, n int, g Grant) {
	t.Helper()
	for i := range n {
		if s.RequestQPs {
			_ = g.ServerQPs[g.Assignment[i]]
		}
		if s.ConnQPs {
			_ = g.ServerConnQPs[i]
		}
		for k := range s.ConnPSNs {
			_ = g.ConnPSNs[k*n+i]
		}
		for k := range s.Regions {
			_, _ = g.RemoteAddr[k*n+i], g.RKey[k*n+i]
		}
	}
	if s.SharedRegion {
		_, _ = g.RemoteAddr[0], g.RKey[0]
	}
	if (s.AnswerQPs && len(g.AnswerQPs) == 0) || (s.AnswerQKey && g.AnswerQKey == 0) || (s.QKey && g.QKey == 0) ||
		(s.Window && g.Window < 1) {
		t.Fatalf("accepted a grant without what its shape needs: %+v", g)
	}
}

// FuzzDecodeAdmission feeds arbitrary bytes, as a Connect request,
// through protobuf decoding and DecodeAdmission (for a herd server,
// which takes conn_qps). Neither may panic; a refusal wraps ErrMismatch
// or ErrMalformed; an admission it returns has QPs, conn_qps none or one
// per QP, no QP twice, only 24-bit QPNs (never 0), and encodes to a
// request that decodes to itself.
func FuzzDecodeAdmission(f *testing.F) {
	a := validAdmission(2)
	a.ConnQPs = []Endpoint{ep(5, 1), ep(5, 2)}
	for _, a := range []Admission{validAdmission(1), a} {
		b, err := proto.Marshal(EncodeAdmission(a, spec.ModeHERD))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req adminpb.ConnectRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		a, err := DecodeAdmission(&req, spec.ModeHERD)
		if err != nil {
			if !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused without a kind: %v", err)
			}
			return
		}
		if len(a.QPs) == 0 || (len(a.ConnQPs) != 0 && len(a.ConnQPs) != len(a.QPs)) {
			t.Fatalf("accepted %d QPs, %d conn QPs", len(a.QPs), len(a.ConnQPs))
		}
		seen := map[Endpoint]bool{}
		for _, e := range a.QPs {
			if seen[e] {
				t.Fatalf("accepted %v twice", e)
			}
			seen[e] = true
		}
		for _, e := range append(append([]Endpoint(nil), a.QPs...), a.ConnQPs...) {
			if e.QPN == 0 || e.QPN > verbs.MaxQPN {
				t.Fatalf("accepted QPN %d", e.QPN)
			}
		}
		again, err := DecodeAdmission(EncodeAdmission(a, spec.ModeHERD), spec.ModeHERD)
		if err != nil || !reflect.DeepEqual(again, a) {
			t.Fatalf("re-encoded admission decoded to %+v, %v; want %+v", again, err, a)
		}
	})
}
