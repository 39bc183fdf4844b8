package admin

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/verbs"
)

// FuzzValidateConnect feeds arbitrary bytes through what the admin plane
// does with a Connect request off the wire: protobuf decoding, then
// validateConnect. Neither may panic; a request validation accepts must
// satisfy every bound a backend relies on, and one it refuses must be
// refused with ErrInvalidArgument. The seed corpus is in
// testdata/fuzz/FuzzValidateConnect.
func FuzzValidateConnect(f *testing.F) {
	valid, err := proto.Marshal(validConnect())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{})
	cfg, err := Config{}.validate() // every mode (spec.Modes)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req adminpb.ConnectRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		err := cfg.validateConnect(&req)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("refused without ErrInvalidArgument: %v", err)
			}
			return
		}
		qps := req.GetQps()
		if len(qps) == 0 || len(qps) > cfg.MaxQPsPerClient {
			t.Fatalf("accepted %d qps", len(qps))
		}
		if cq := req.GetConnQps(); len(cq) != 0 && len(cq) != len(qps) {
			t.Fatalf("accepted %d conn_qps for %d qps", len(cq), len(qps))
		}
		for _, ep := range append(append([]*adminpb.Endpoint{}, qps...), req.GetConnQps()...) {
			var a verbs.Address
			if err := a.UnmarshalBinary(ep.GetAddress()); err != nil {
				t.Fatalf("accepted an address that does not decode: %v", err)
			}
			if ep.GetQpn() == 0 || ep.GetQpn() > uint32(verbs.MaxQPN) {
				t.Fatalf("accepted qpn %d", ep.GetQpn())
			}
		}
		if w := req.GetWindow(); w == 0 || int(w) > cfg.MaxWindow {
			t.Fatalf("accepted window %d", w)
		}
		if len(req.GetClientName()) > MaxClientNameLen {
			t.Fatalf("accepted a %d-byte name", len(req.GetClientName()))
		}
	})
}

// FuzzValidateOthers: Disconnect, SetMode and Advance requests off the
// wire. Decoding and validation never panic, and refusals are
// InvalidArgument.
func FuzzValidateOthers(f *testing.F) {
	for _, m := range []proto.Message{&adminpb.DisconnectRequest{SessionId: 7}, &adminpb.AdvanceRequest{Min: 1 << 40},
		&adminpb.SetModeRequest{Mode: "herd"}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d adminpb.DisconnectRequest
		if proto.Unmarshal(b, &d) == nil {
			if err := validateDisconnect(&d); err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("disconnect: %v", err)
			} else if err == nil && len(d.GetSessionToken()) != TokenLen {
				// Sessions are named by token (protocol version 2);
				// session_id is ignored, so any value of it is fine.
				t.Fatalf("disconnect: accepted a %d-byte token", len(d.GetSessionToken()))
			}
		}
		var a adminpb.AdvanceRequest
		if proto.Unmarshal(b, &a) == nil {
			if err := validateAdvance(&a); err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("advance: %v", err)
			} else if err == nil && a.GetMin() == 0 {
				t.Fatal("advance: accepted min 0")
			}
		}
		var s adminpb.SetModeRequest
		_ = proto.Unmarshal(b, &s) // SetMode's check is a list lookup in the handler
	})
}
