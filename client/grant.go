package client

import (
	"context"
	"fmt"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/verbs"
)

// attacher is a transport whose QPs a grant brings up.
type attacher interface {
	transport
	attach(g handshake.Grant) error
}

// admit runs the Connect for req (tr's QPs) and attaches tr to the grant;
// tr is closed when either fails. The dialers of the modes whose QPs are
// fresh at every connect end with it.
func admit(ctx context.Context, env *transportEnv, req *adminpb.ConnectRequest, tr attacher) (transport, error) {
	resp, err := env.connect(ctx, req)
	var g handshake.Grant
	if err == nil {
		g, err = grantOf(resp)
	}
	if err == nil {
		err = tr.attach(g)
	}
	if err != nil {
		tr.Close()
		return nil, err
	}
	return tr, nil
}

// grantOf decodes a Connect answer into Go values: what a mode's dialer
// attaches its QPs to (the inverse of what package modes encodes).
func grantOf(resp *adminpb.ConnectResponse) (handshake.Grant, error) {
	g := handshake.Grant{Session: resp.GetSessionId(), Epoch: resp.GetEpoch(), Window: int(resp.GetWindow()),
		QKey: resp.GetQkey(), AnswerQKey: resp.GetAnswerQkey(), Assignment: resp.GetAssignment(),
		RemoteAddr: resp.GetRemoteAddr(), RKey: resp.GetRkey(), High: resp.GetHigh()}
	var err error
	if g.ServerQPs, err = endpoints("server_qps", resp.GetServerQps()); err != nil {
		return g, err
	}
	if g.ServerConnQPs, err = endpoints("server_conn_qps", resp.GetServerConnQps()); err != nil {
		return g, err
	}
	if g.AnswerQPs, err = endpoints("answer_qps", resp.GetAnswerQps()); err != nil {
		return g, err
	}
	for _, p := range resp.GetConnPsns() {
		g.ConnPSNs = append(g.ConnPSNs, verbs.PSN(p))
	}
	return g, nil
}

func endpoints(field string, eps []*adminpb.Endpoint) ([]handshake.Endpoint, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	out := make([]handshake.Endpoint, len(eps))
	for i, e := range eps {
		a, q, err := endpoint(e)
		if err != nil {
			return nil, fmt.Errorf("%w: connect: %s[%d]: %v", ErrUnavailable, field, i, err)
		}
		out[i] = handshake.Endpoint{Addr: a, QPN: q}
	}
	return out, nil
}

func endpoint(e *adminpb.Endpoint) (verbs.Address, verbs.QPN, error) {
	var a verbs.Address
	err := a.UnmarshalBinary(e.GetAddress())
	return a, verbs.QPN(e.GetQpn()), err
}

// pbEndpoints encodes QPs for a ConnectRequest.
func pbEndpoints(eps []handshake.Endpoint) []*adminpb.Endpoint {
	out := make([]*adminpb.Endpoint, len(eps))
	for i, e := range eps {
		b, _ := e.Addr.MarshalBinary()
		out[i] = &adminpb.Endpoint{Address: b, Qpn: uint32(e.QPN)}
	}
	return out
}

// sendersOf is the set of QPs answers may come from.
func sendersOf(eps []handshake.Endpoint) verbs.Senders {
	out := make(verbs.Senders, len(eps))
	for i, e := range eps {
		out[i] = verbs.SenderOf(e.Addr, e.QPN)
	}
	return out
}

// senders decodes the server's response QPs (ConnectResponse.answer_qps).
func senders(eps []*adminpb.Endpoint) (verbs.Senders, error) {
	des, err := endpoints("answer_qps", eps)
	return sendersOf(des), err
}
