// Package handshake is the admin plane's Connect exchange in Go values,
// and the one translation between them and the adminpb messages.
//
// A client offers its queue pairs (Admission, a ConnectRequest); the
// server's mode admits them and answers with what the client attaches to
// (Grant, a ConnectResponse); a Disconnect, or a Connect that replaces a
// session, names one session of one epoch (SessionRef). Each is encoded
// by one function here and decoded by one, and the decoder holds every
// check the readers rely on: a value a Decode function returns is safe
// to index and to hand to the provider (every address decodes, every QPN
// and PSN fits in 24 bits, every count matches the mode's shape,
// spec.ModeFacts.Grant). Bad input is an error value wrapping
// ErrMismatch or ErrMalformed, never a panic.
//
// The admin server's modes speak these values (dataplane.Mode); the
// client library, the load generator and the admin adapter of the modes
// (modes/adminmode) are the readers and writers of the messages. Nothing
// here does I/O.
package handshake

import (
	"errors"
	"fmt"
	"slices"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The kinds of error a mode's Admit and Release return
// (dataplane.Mode), wrapped with detail. The admin server maps each to
// the admin error and gRPC code of the same name; its clients meet
// ErrUnavailable again as adminclient.ErrUnavailable.
var (
	// ErrUnavailable: the mode is stopping or failed; try again later.
	ErrUnavailable = errors.New("unavailable")
	// ErrNoCapacity: admitting the session would exceed a limit.
	ErrNoCapacity = errors.New("no capacity")
	// ErrInvalidArgument: the admission request is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition: well formed, but not for this mode or state
	// (a QP already connected, the wrong QP kinds).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnknownSession: no such session in this mode and epoch.
	ErrUnknownSession = errors.New("unknown session")
)

// The kinds of error a Decode function returns, wrapped with detail.
var (
	// ErrMismatch: the message is well formed but not for this end: a
	// protocol version it does not speak, or another mode.
	ErrMismatch = errors.New("handshake: mismatch")
	// ErrMalformed: a field is missing, out of range or inconsistent
	// with another.
	ErrMalformed = errors.New("handshake: malformed")
)

// Endpoint names a queue pair: its address and number.
type Endpoint struct {
	Addr verbs.Address
	QPN  verbs.QPN
}

// Admission is a client's request to be admitted (ConnectRequest in Go
// values; the protocol version and mode name are checked by
// DecodeAdmission).
type Admission struct {
	Name string
	// Window is the outstanding requests asked for per client QP (0: the
	// mode's default). The mode grants at most its maximum.
	Window int
	// QPs are the client's QPs: those the server answers (UD) or
	// connects to (RC, UC). ConnQPs is a second set for modes that need
	// two kinds (herd: the UC QPs that WRITE requests).
	QPs, ConnQPs []Endpoint
	// Identities are the caller's verified identities (its admin-plane
	// client certificate's); empty for an anonymous caller. A mode that
	// cannot hold every client to its protocol admits only trusted ones
	// (atomics on a NIC). They never travel in the message: the admin
	// server fills them in.
	Identities []string
}

// SessionRef names one session of one epoch (DisconnectRequest, and the
// session a Connect replaces).
type SessionRef struct {
	ID    uint64
	Epoch uint64
}

// Grant is what an admitted client learns (ConnectResponse in Go values).
// A mode fills in what it grants; Mode and Format are the server's, which
// the admin adapter fills in. Fields a mode does not use stay empty. The
// session token and lease are the admin server's, not the mode's: they
// are not here.
type Grant struct {
	// Mode is the mode granting (spec.Mode*), Format its values' format
	// (zero when the answer names one this end does not know: values
	// are then not predicted).
	Mode    string
	Format  spec.Format
	Session uint64
	Epoch   uint64
	Window  int
	// QKey is the request Q_Key (the server's request QPs'); AnswerQKey
	// the session's own, carried by every answer.
	QKey, AnswerQKey uint32
	// ServerQPs are the server's request QPs; client QP i sends to
	// ServerQPs[Assignment[i]].
	ServerQPs  []Endpoint
	Assignment []uint32
	// ServerConnQPs are the server's connected QPs (RC/UC), one per
	// client QP, with the first PSN each expects in ConnPSNs.
	ServerConnQPs []Endpoint
	ConnPSNs      []verbs.PSN
	// AnswerQPs are the QPs answers come from: the client drops any
	// other sender.
	AnswerQPs []Endpoint
	// RemoteAddr and RKey name server memory the client accesses with
	// one-sided verbs (per client QP, or one region).
	RemoteAddr []uint64
	RKey       []uint32
	// High is a recent value (the initial speculation); 0: none.
	High uint64
}

// EncodeEndpoint is e as the protocol carries it.
func EncodeEndpoint(e Endpoint) *adminpb.Endpoint {
	a, _ := e.Addr.MarshalBinary() // never fails
	return &adminpb.Endpoint{Address: a, Qpn: uint32(e.QPN)}
}

// DecodeEndpoint reads a QP's name: a 20-byte address and a QPN in
// 1 … verbs.MaxQPN (0 is no data QP; the wire carries 24 bits).
func DecodeEndpoint(pb *adminpb.Endpoint) (Endpoint, error) {
	e, err := decodeEndpoint(pb)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return e, nil
}

// decodeEndpoint is DecodeEndpoint with errors of no kind.
func decodeEndpoint(pb *adminpb.Endpoint) (Endpoint, error) {
	var a verbs.Address
	if len(pb.GetAddress()) != verbs.AddressLen {
		return Endpoint{}, fmt.Errorf("address is %d bytes, want %d", len(pb.GetAddress()), verbs.AddressLen)
	}
	if err := a.UnmarshalBinary(pb.GetAddress()); err != nil {
		return Endpoint{}, err
	}
	if q := pb.GetQpn(); q == 0 || q > uint32(verbs.MaxQPN) {
		return Endpoint{}, fmt.Errorf("qpn %d outside 1..%d", q, verbs.MaxQPN)
	}
	return Endpoint{Addr: a, QPN: verbs.QPN(pb.GetQpn())}, nil
}

func encodeEndpoints(eps []Endpoint) []*adminpb.Endpoint {
	if len(eps) == 0 {
		return nil
	}
	out := make([]*adminpb.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = EncodeEndpoint(e)
	}
	return out
}

// decodeEndpoints decodes the repeated field named field.
func decodeEndpoints(field string, pbs []*adminpb.Endpoint) ([]Endpoint, error) {
	if len(pbs) == 0 {
		return nil, nil
	}
	out := make([]Endpoint, len(pbs))
	for i, pb := range pbs {
		e, err := decodeEndpoint(pb)
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %v", ErrMalformed, field, i, err)
		}
		out[i] = e
	}
	return out, nil
}

// EncodeAdmission is the ConnectRequest asking mode to admit a, in this
// end's protocol version. The caller adds the session it replaces.
func EncodeAdmission(a Admission, mode string) *adminpb.ConnectRequest {
	return &adminpb.ConnectRequest{Qps: encodeEndpoints(a.QPs), ConnQps: encodeEndpoints(a.ConnQPs),
		Window: uint32(a.Window), Mode: mode, ClientName: a.Name, ProtocolVersion: spec.ProtocolVersion}
}

// DecodeAdmission reads a ConnectRequest for a server running mode. It
// refuses (ErrMismatch) a request for another mode or below this
// protocol version (a client above it is admitted and learns the
// server's version from the answer), and (ErrMalformed) one without QPs,
// with conn_qps neither empty nor one per QP, a QP named twice, or an
// endpoint DecodeEndpoint refuses. The window and the number of QPs are
// the admin server's limits to check, not the protocol's.
func DecodeAdmission(req *adminpb.ConnectRequest, mode string) (Admission, error) {
	var a Admission
	if m := req.GetMode(); m != "" && m != mode {
		return a, fmt.Errorf("%w: this server runs %s, not %s", ErrMismatch, mode, m)
	}
	if v := req.GetProtocolVersion(); v < spec.ProtocolVersion {
		return a, fmt.Errorf("%w: protocol version %d, server speaks %d", ErrMismatch, v, spec.ProtocolVersion)
	}
	n := len(req.GetQps())
	if n == 0 {
		return a, fmt.Errorf("%w: no queue pairs", ErrMalformed)
	}
	if c := len(req.GetConnQps()); c != 0 && c != n {
		return a, fmt.Errorf("%w: %d conn_qps for %d qps", ErrMalformed, c, n)
	}
	var err error
	if a.QPs, err = decodeEndpoints("qps", req.GetQps()); err != nil {
		return Admission{}, err
	}
	if a.ConnQPs, err = decodeEndpoints("conn_qps", req.GetConnQps()); err != nil {
		return Admission{}, err
	}
	for i, e := range a.QPs {
		if j := slices.Index(a.QPs[:i], e); j >= 0 {
			return Admission{}, fmt.Errorf("%w: qps[%d] repeats qps[%d]", ErrMalformed, i, j)
		}
	}
	a.Name, a.Window = req.GetClientName(), int(req.GetWindow())
	return a, nil
}

// EncodeSessionRef is the DisconnectRequest releasing r, the session
// whose capability is token (empty on the admin server's side, where the
// token was already looked up).
func EncodeSessionRef(r SessionRef, token []byte) *adminpb.DisconnectRequest {
	return &adminpb.DisconnectRequest{SessionId: r.ID, SessionToken: token, Epoch: r.Epoch}
}

// DecodeSessionRef is the session req names. Every value names some
// session: whether the server holds it is the server's to check.
func DecodeSessionRef(req *adminpb.DisconnectRequest) SessionRef {
	return SessionRef{ID: req.GetSessionId(), Epoch: req.GetEpoch()}
}

// EncodeGrant is g as the protocol carries it, in this end's protocol
// version. The admin server adds the session token and lease.
func EncodeGrant(g Grant) *adminpb.ConnectResponse {
	resp := &adminpb.ConnectResponse{SessionId: g.Session, Mode: g.Mode, Qkey: g.QKey,
		ServerQps: encodeEndpoints(g.ServerQPs), Assignment: slices.Clone(g.Assignment), Window: uint32(g.Window),
		High: g.High, ProtocolVersion: spec.ProtocolVersion, Epoch: g.Epoch, ServerConnQps: encodeEndpoints(g.ServerConnQPs),
		RemoteAddr: slices.Clone(g.RemoteAddr), Rkey: slices.Clone(g.RKey), AnswerQkey: g.AnswerQKey,
		AnswerQps: encodeEndpoints(g.AnswerQPs)}
	if g.Format.Valid() {
		resp.Format = g.Format.String()
	}
	for _, p := range g.ConnPSNs {
		resp.ConnPsns = append(resp.ConnPsns, uint32(p))
	}
	return resp
}

// CheckVersion refuses (ErrMismatch) a Connect answer of another
// protocol version than this end's: a server admits a client above its
// own version and answers with its own, so only the client can tell
// (PROTOCOL.md, "Connecting: what the fields mean").
func CheckVersion(resp *adminpb.ConnectResponse) error {
	if v := resp.GetProtocolVersion(); v != spec.ProtocolVersion {
		return fmt.Errorf("%w: the server speaks protocol version %d, this end %d", ErrMismatch, v, spec.ProtocolVersion)
	}
	return nil
}

// DecodeGrant reads the answer resp to the Connect req. It refuses
// (ErrMismatch) an answer of another protocol version (CheckVersion) or
// of another mode than req asked for, or of a mode this end does not
// know.
// It refuses (ErrMalformed) an answer whose endpoints DecodeEndpoint
// refuses; whose PSNs do not fit in 24 bits; whose window is above req's;
// whose remote_addr and rkey differ in length; or whose fields do not
// have the mode's shape (spec.ModeFacts.Grant) for req's number of QPs,
// an assignment naming a server QP the answer does not have included.
func DecodeGrant(req *adminpb.ConnectRequest, resp *adminpb.ConnectResponse) (Grant, error) {
	var g Grant
	if err := CheckVersion(resp); err != nil {
		return g, err
	}
	mode := resp.GetMode()
	if want := req.GetMode(); want != "" && mode != want {
		return g, fmt.Errorf("%w: the server granted mode %q, not %q", ErrMismatch, mode, want)
	}
	facts, ok := spec.Facts(mode)
	if !ok {
		return g, fmt.Errorf("%w: the server granted mode %q, which this end does not speak", ErrMismatch, mode)
	}
	g = Grant{Mode: mode, Session: resp.GetSessionId(), Epoch: resp.GetEpoch(), Window: int(resp.GetWindow()),
		QKey: resp.GetQkey(), AnswerQKey: resp.GetAnswerQkey(), Assignment: slices.Clone(resp.GetAssignment()),
		RemoteAddr: slices.Clone(resp.GetRemoteAddr()), RKey: slices.Clone(resp.GetRkey()), High: resp.GetHigh()}
	g.Format, _ = spec.ParseFormat(resp.GetFormat()) // unknown: zero, no prediction
	var err error
	if g.ServerQPs, err = decodeEndpoints("server_qps", resp.GetServerQps()); err != nil {
		return Grant{}, err
	}
	if g.ServerConnQPs, err = decodeEndpoints("server_conn_qps", resp.GetServerConnQps()); err != nil {
		return Grant{}, err
	}
	if g.AnswerQPs, err = decodeEndpoints("answer_qps", resp.GetAnswerQps()); err != nil {
		return Grant{}, err
	}
	for i, p := range resp.GetConnPsns() {
		if p > verbs.PSNMask {
			return Grant{}, fmt.Errorf("%w: conn_psns[%d] = %#x: above 24 bits", ErrMalformed, i, p)
		}
		g.ConnPSNs = append(g.ConnPSNs, verbs.PSN(p))
	}
	if w := req.GetWindow(); w != 0 && resp.GetWindow() > w {
		return Grant{}, fmt.Errorf("%w: window %d granted, %d asked", ErrMalformed, resp.GetWindow(), w)
	}
	if len(g.RemoteAddr) != len(g.RKey) {
		return Grant{}, fmt.Errorf("%w: %d remote_addr, %d rkey", ErrMalformed, len(g.RemoteAddr), len(g.RKey))
	}
	if err := checkShape(facts.Grant, len(req.GetQps()), &g); err != nil {
		return Grant{}, fmt.Errorf("%w: %s grant for %d QPs: %v", ErrMalformed, mode, len(req.GetQps()), err)
	}
	return g, nil
}

// checkShape checks g against shape s for n client QPs: the first
// difference.
func checkShape(s spec.GrantShape, n int, g *Grant) error {
	count := func(field string, got, want int) error {
		if got != want {
			return fmt.Errorf("%d %s, want %d", got, field, want)
		}
		return nil
	}
	regions := s.Regions * n
	if s.SharedRegion {
		regions = 1
	}
	switch {
	case s.RequestQPs && len(g.ServerQPs) == 0:
		return errors.New("no server_qps")
	case s.RequestQPs && len(g.Assignment) != n:
		return count("assignment", len(g.Assignment), n)
	case s.QKey && g.QKey == 0:
		return errors.New("qkey 0")
	case s.ConnQPs && len(g.ServerConnQPs) != n:
		return count("server_conn_qps", len(g.ServerConnQPs), n)
	case s.ConnPSNs != 0 && len(g.ConnPSNs) != s.ConnPSNs*n:
		return count("conn_psns", len(g.ConnPSNs), s.ConnPSNs*n)
	case regions != 0 && len(g.RemoteAddr) != regions:
		return count("remote_addr", len(g.RemoteAddr), regions)
	case s.AnswerQPs && len(g.AnswerQPs) == 0:
		return errors.New("no answer_qps")
	case s.AnswerQKey && g.AnswerQKey == 0:
		return errors.New("answer_qkey 0")
	case s.Window && g.Window < 1:
		return errors.New("window 0")
	}
	if s.RequestQPs {
		for i, k := range g.Assignment {
			if int(k) >= len(g.ServerQPs) {
				return fmt.Errorf("assignment[%d] = %d of %d server_qps", i, k, len(g.ServerQPs))
			}
		}
	}
	return nil
}
