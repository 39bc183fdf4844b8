package client

import (
	"context"
	"fmt"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/verbs"
)

// attacher is a transport whose QPs a grant brings up. The grant attach
// gets was decoded by handshake.DecodeGrant for the transport's QPs: it
// has the mode's shape (spec.ModeFacts.Grant), so attach indexes it
// without checking it again.
type attacher interface {
	transport
	attach(g handshake.Grant) error
}

// admit asks mode to admit a (tr's QPs) and attaches tr to the grant; tr
// is closed when either fails. The dialers of the modes whose QPs are
// fresh at every connect end with it.
func admit(ctx context.Context, env *transportEnv, a handshake.Admission, mode string, tr attacher) (transport, error) {
	g, err := grant(ctx, env, a, mode)
	if err == nil {
		err = tr.attach(g)
	}
	if err != nil {
		tr.Close()
		return nil, err
	}
	return tr, nil
}

// grant runs the Connect asking mode to admit a and decodes the answer:
// the one way from a Connect answer to the grant a transport attaches to,
// for every mode.
func grant(ctx context.Context, env *transportEnv, a handshake.Admission, mode string) (handshake.Grant, error) {
	req := handshake.EncodeAdmission(a, mode)
	resp, err := env.connect(ctx, req)
	if err != nil {
		return handshake.Grant{}, err
	}
	g, err := handshake.DecodeGrant(req, resp)
	if err != nil {
		return handshake.Grant{}, fmt.Errorf("%w: connect: %w", ErrUnavailable, err)
	}
	return g, nil
}

// sendersOf is the set of QPs answers may come from.
func sendersOf(eps []handshake.Endpoint) verbs.Senders {
	out := make(verbs.Senders, len(eps))
	for i, e := range eps {
		out[i] = verbs.SenderOf(e.Addr, e.QPN)
	}
	return out
}
