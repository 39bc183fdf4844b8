//go:build linux

package wire

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// ErrAdmit reports that the server refused or garbled an admission.
var ErrAdmit = errors.New("wire: admission")

// DefaultPerSession is how many flows share one session: the admin
// plane's default limit of QPs per Connect (admin.DefaultMaxQPsPerClient).
const DefaultPerSession = 16

// Sessions are the admin sessions the flows were admitted in. Close
// disconnects them; until then a goroutine keeps their leases alive.
type Sessions struct {
	adm    adminpb.AdminClient
	tokens [][]byte
	ids    []uint64
	epoch  uint64
	stop   chan struct{}
	wg     sync.WaitGroup
}

// Admit connects g's flows to seqd through Admin.Connect in mode (one of
// spec.WireModes: kindOf), perSession flows per session (0:
// DefaultPerSession), like the client library registers its QPs: address
// (the flow's source address and the generator's port) and QPN; in HERD
// also the flow's UC QP (conn_qps). It points g at the granted server
// QPs.
func Admit(ctx context.Context, adm adminpb.AdminClient, g *Gen, mode string, perSession int, name string) (*Sessions, error) {
	if perSession <= 0 {
		perSession = DefaultPerSession
	}
	kind, err := kindOf(mode)
	if err != nil {
		return nil, err
	}
	window := g.Window()
	switch kind {
	case HERD:
		window = min(window, spec.HERDMaxWindow)
	case ERPC:
		// The window asked for is the session's credits: the receives
		// the server reserves for it (seqd's -max-window bounds them):
		// Config.Credits, else the flows' window, which has no more
		// requests in flight than a session has slots (SetTarget).
		window = min(window, spec.ERPCSlots)
		if g.cfg.Credits > 0 {
			window = min(g.cfg.Credits, spec.ERPCMaxCredits)
		}
	}
	ss := &Sessions{adm: adm, stop: make(chan struct{})}
	t := Target{Kind: kind, Flows: make([]FlowTarget, g.Flows())}
	var lease time.Duration
	for lo := 0; lo < g.Flows(); lo += perSession {
		hi := min(lo+perSession, g.Flows())
		a := handshake.Admission{Name: fmt.Sprintf("%s-%d", name, lo/perSession), Window: window}
		for i := lo; i < hi; i++ {
			ap, qpn := g.FlowAddr(i)
			addr := verbs.Address{GID: verbs.GIDFromAddr(ap.Addr()), Port: ap.Port()}
			a.QPs = append(a.QPs, handshake.Endpoint{Addr: addr, QPN: verbs.QPN(qpn)})
			if kind == HERD {
				a.ConnQPs = append(a.ConnQPs, handshake.Endpoint{Addr: addr, QPN: verbs.QPN(qpn + UCOffset)})
			}
		}
		req := handshake.EncodeAdmission(a, mode)
		resp, err := adm.Connect(ctx, req)
		if err != nil {
			ss.Close(ctx)
			return nil, fmt.Errorf("%w: connect flows %d-%d: %v", ErrAdmit, lo, hi-1, err)
		}
		ss.tokens = append(ss.tokens, resp.GetSessionToken())
		ss.ids = append(ss.ids, resp.GetSessionId())
		ss.epoch = resp.GetEpoch()
		gr, err := handshake.DecodeGrant(req, resp)
		if err == nil && kind == HERD {
			err = grantHERD(gr, &t, lo, hi)
		} else if err == nil {
			err = grant(gr, &t, lo, hi)
		}
		if err == nil && kind == ERPC {
			for i := lo; i < hi; i++ {
				t.Flows[i].Session = gr.Session
			}
		}
		if err != nil {
			ss.Close(ctx)
			return nil, fmt.Errorf("%w: flows %d-%d: %w", ErrAdmit, lo, hi-1, err)
		}
		if ms := resp.GetLeaseMs(); ms > 0 {
			lease = time.Duration(ms) * time.Millisecond
		}
	}
	if err := g.SetTarget(t); err != nil {
		ss.Close(ctx)
		return nil, err
	}
	if lease > 0 {
		ss.wg.Add(1)
		go ss.keepAlive(lease / 3)
	}
	return ss, nil
}

// grant fills flows lo..hi-1 of t from a Spec-S0 grant (decoded for
// them, so it has their assignments).
func grant(g handshake.Grant, t *Target, lo, hi int) error {
	for _, ep := range g.AnswerQPs {
		t.AnswerQPNs = appendNew(t.AnswerQPNs, uint32(ep.QPN))
	}
	t.High = max(t.High, g.High)
	if g.Format.Valid() {
		t.HighPeriod = spec.HighPeriod(g.Format)
	}
	for i := lo; i < hi; i++ {
		k := g.Assignment[i-lo]
		srv := g.ServerQPs[k]
		ip, err := ipv4(srv.Addr)
		if err != nil {
			return fmt.Errorf("server QP %d: %w", k, err)
		}
		t.Flows[i] = FlowTarget{Server: netip.AddrPortFrom(ip, srv.Addr.RoCEPort()), QPN: uint32(srv.QPN),
			QKey: g.QKey, Window: g.Window, AnswerQKey: g.AnswerQKey}
	}
	return nil
}

// grantHERD fills flows lo..hi-1 of t from a herd grant: per client QP
// the server's UC QP, the address of its slot 0 and the R_Key.
func grantHERD(g handshake.Grant, t *Target, lo, hi int) error {
	for _, ep := range g.AnswerQPs {
		t.AnswerQPNs = appendNew(t.AnswerQPNs, uint32(ep.QPN))
	}
	for i := lo; i < hi; i++ {
		srv := g.ServerConnQPs[i-lo]
		ip, err := ipv4(srv.Addr)
		if err != nil {
			return fmt.Errorf("server UC QP %d: %w", i-lo, err)
		}
		t.Flows[i] = FlowTarget{Server: netip.AddrPortFrom(ip, srv.Addr.RoCEPort()), QPN: uint32(srv.QPN),
			Window: g.Window, RemoteAddr: g.RemoteAddr[i-lo], RKey: g.RKey[i-lo], AnswerQKey: g.AnswerQKey}
	}
	return nil
}

// ipv4 is a's IPv4 address: the generator sends IPv4 only.
func ipv4(a verbs.Address) (netip.Addr, error) {
	ip := a.GID.Addr()
	if !ip.Is4() {
		return netip.Addr{}, fmt.Errorf("at %v: IPv4 only", a)
	}
	return ip, nil
}

func appendNew(s []uint32, v uint32) []uint32 {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func (ss *Sessions) keepAlive(every time.Duration) {
	defer ss.wg.Done()
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ss.stop:
			return
		case <-tk.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			ss.adm.KeepAlive(ctx, &adminpb.KeepAliveRequest{SessionTokens: ss.tokens})
			cancel()
		}
	}
}

// Close stops the keep-alives and disconnects every session.
func (ss *Sessions) Close(ctx context.Context) error {
	select {
	case <-ss.stop:
		return nil
	default:
		close(ss.stop)
	}
	ss.wg.Wait()
	var errs []error
	for i, tok := range ss.tokens {
		if _, err := ss.adm.Disconnect(ctx, handshake.EncodeSessionRef(handshake.SessionRef{ID: ss.ids[i], Epoch: ss.epoch}, tok)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// kindOf is the target Kind that speaks mode: the generator's modes are
// spec.WireModes (ModeFacts.Wire), TestKindOfFollowsTable keeps them so.
func kindOf(mode string) (Kind, error) {
	switch mode {
	case spec.ModeSpecS0:
		return Seqd, nil
	case spec.ModeHERD:
		return HERD, nil
	case spec.ModeERPC:
		return ERPC, nil
	}
	return 0, fmt.Errorf("%w: mode %q (the wire generator speaks %s)", ErrAdmit, mode, spec.ModeList(spec.WireModes()))
}
