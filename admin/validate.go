package admin

import (
	"fmt"
	"slices"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/verbs"
)

// validateConnect is the one place a ConnectRequest is checked before the
// backend sees it. The error it returns wraps ErrInvalidArgument.
func (cfg *Config) validateConnect(req *adminpb.ConnectRequest) error {
	qps := req.GetQps()
	if len(qps) == 0 {
		return fmt.Errorf("%w: connect: no queue pairs", ErrInvalidArgument)
	}
	if len(qps) > cfg.MaxQPsPerClient {
		return fmt.Errorf("%w: connect: %d queue pairs, at most %d allowed", ErrInvalidArgument, len(qps), cfg.MaxQPsPerClient)
	}
	if r := req.GetReplaces(); len(r) != 0 && len(r) != TokenLen {
		return fmt.Errorf("%w: connect: replaces is %d bytes, want a %d-byte session token (or none)", ErrInvalidArgument, len(r), TokenLen)
	}
	if cq := req.GetConnQps(); len(cq) != 0 && len(cq) != len(qps) {
		return fmt.Errorf("%w: connect: %d conn_qps for %d qps", ErrInvalidArgument, len(cq), len(qps))
	}
	for i, qp := range req.GetConnQps() {
		if err := validateEndpoint("conn_qps", i, qp); err != nil {
			return err
		}
	}
	for i, qp := range qps {
		if err := validateEndpoint("qps", i, qp); err != nil {
			return err
		}
		for j, prev := range qps[:i] {
			if prev.GetQpn() == qp.GetQpn() && string(prev.GetAddress()) == string(qp.GetAddress()) {
				return fmt.Errorf("%w: connect: qps[%d] repeats qps[%d]", ErrInvalidArgument, i, j)
			}
		}
	}
	if w := req.GetWindow(); w == 0 || uint64(w) > uint64(cfg.MaxWindow) {
		return fmt.Errorf("%w: connect: window %d outside 1..%d", ErrInvalidArgument, w, cfg.MaxWindow)
	}
	if n := len(req.GetClientName()); n > MaxClientNameLen {
		return fmt.Errorf("%w: connect: client_name is %d bytes, at most %d allowed", ErrInvalidArgument, n, MaxClientNameLen)
	}
	if m := req.GetMode(); m != "" && !slices.Contains(cfg.Modes, m) {
		return fmt.Errorf("%w: connect: unknown mode %q (known: %q)", ErrInvalidArgument, m, cfg.Modes)
	}
	return nil
}

func validateEndpoint(field string, i int, qp *adminpb.Endpoint) error {
	if n := len(qp.GetAddress()); n != verbs.AddressLen {
		return fmt.Errorf("%w: connect: %s[%d]: address is %d bytes, want %d", ErrInvalidArgument, field, i, n, verbs.AddressLen)
	}
	if qpn := qp.GetQpn(); qpn == 0 || qpn > uint32(verbs.MaxQPN) {
		return fmt.Errorf("%w: connect: %s[%d]: qpn %d outside 1..%d", ErrInvalidArgument, field, i, qpn, verbs.MaxQPN)
	}
	return nil
}

// validateDisconnect checks a DisconnectRequest: it names its session by
// token (protocol version 2), never by a bare ID.
func validateDisconnect(req *adminpb.DisconnectRequest) error {
	if n := len(req.GetSessionToken()); n != TokenLen {
		return fmt.Errorf("%w: disconnect: session_token is %d bytes, want %d (protocol version 2 names sessions by token, not ID)", ErrInvalidArgument, n, TokenLen)
	}
	return nil
}

// validateAdvance checks an AdvanceRequest: min zero is what an unset
// field reads as, and can never move the counter.
func validateAdvance(req *adminpb.AdvanceRequest) error {
	if req.GetMin() == 0 {
		return fmt.Errorf("%w: advance: min is unset", ErrInvalidArgument)
	}
	return nil
}
