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
	if kind == HERD {
		window = min(window, spec.HERDMaxWindow)
	}
	ss := &Sessions{adm: adm, stop: make(chan struct{})}
	t := Target{Kind: kind, Flows: make([]FlowTarget, g.Flows())}
	var lease time.Duration
	for lo := 0; lo < g.Flows(); lo += perSession {
		hi := min(lo+perSession, g.Flows())
		req := &adminpb.ConnectRequest{Window: uint32(window), Mode: mode,
			ClientName: fmt.Sprintf("%s-%d", name, lo/perSession), ProtocolVersion: spec.ProtocolVersion}
		for i := lo; i < hi; i++ {
			ap, qpn := g.FlowAddr(i)
			a, _ := verbs.Address{GID: verbs.GIDFromAddr(ap.Addr()), Port: ap.Port()}.MarshalBinary()
			req.Qps = append(req.Qps, &adminpb.Endpoint{Address: a, Qpn: qpn})
			if kind == HERD {
				req.ConnQps = append(req.ConnQps, &adminpb.Endpoint{Address: a, Qpn: qpn + UCOffset})
			}
		}
		resp, err := adm.Connect(ctx, req)
		if err != nil {
			ss.Close(ctx)
			return nil, fmt.Errorf("%w: connect flows %d-%d: %v", ErrAdmit, lo, hi-1, err)
		}
		ss.tokens = append(ss.tokens, resp.GetSessionToken())
		ss.ids = append(ss.ids, resp.GetSessionId())
		ss.epoch = resp.GetEpoch()
		grantf := grant
		if kind == HERD {
			grantf = grantHERD
		}
		if err := grantf(resp, &t, lo, hi); err != nil {
			ss.Close(ctx)
			return nil, err
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

// grant fills flows lo..hi-1 of t from a ConnectResponse.
func grant(resp *adminpb.ConnectResponse, t *Target, lo, hi int) error {
	if v := resp.GetProtocolVersion(); v != spec.ProtocolVersion {
		return fmt.Errorf("%w: server speaks protocol version %d", ErrAdmit, v)
	}
	if resp.GetMode() != spec.ModeSpecS0 {
		return fmt.Errorf("%w: server serves %q, not %s", ErrAdmit, resp.GetMode(), spec.ModeSpecS0)
	}
	if len(resp.GetAssignment()) != hi-lo || len(resp.GetServerQps()) == 0 || resp.GetWindow() == 0 ||
		len(resp.GetAnswerQps()) == 0 || resp.GetAnswerQkey() == 0 {
		return fmt.Errorf("%w: malformed grant (%d assignments for %d QPs, %d server QPs, window %d, %d answer QPs)",
			ErrAdmit, len(resp.GetAssignment()), hi-lo, len(resp.GetServerQps()), resp.GetWindow(), len(resp.GetAnswerQps()))
	}
	for _, ep := range resp.GetAnswerQps() {
		t.AnswerQPNs = appendNew(t.AnswerQPNs, ep.GetQpn())
	}
	if h := resp.GetHigh(); h > t.High {
		t.High = h
	}
	if f, err := spec.ParseFormat(resp.GetFormat()); err == nil {
		t.HighPeriod = spec.HighPeriod(f)
	}
	srv := resp.GetServerQps()
	for i := lo; i < hi; i++ {
		k := int(resp.GetAssignment()[i-lo])
		if k >= len(srv) {
			return fmt.Errorf("%w: assignment %d out of range", ErrAdmit, k)
		}
		var a verbs.Address
		if err := a.UnmarshalBinary(srv[k].GetAddress()); err != nil {
			return fmt.Errorf("%w: server QP %d: %v", ErrAdmit, k, err)
		}
		ip := a.GID.Addr()
		if !ip.Is4() {
			return fmt.Errorf("%w: server QP %d at %v: IPv4 only", ErrAdmit, k, a)
		}
		t.Flows[i] = FlowTarget{Server: netip.AddrPortFrom(ip, a.RoCEPort()), QPN: srv[k].GetQpn(),
			QKey: resp.GetQkey(), Window: int(resp.GetWindow()), AnswerQKey: resp.GetAnswerQkey()}
	}
	return nil
}

// grantHERD fills flows lo..hi-1 of t from a herd ConnectResponse: per
// client QP the server's UC QP, the address of its slot 0 and the R_Key.
func grantHERD(resp *adminpb.ConnectResponse, t *Target, lo, hi int) error {
	if v := resp.GetProtocolVersion(); v != spec.ProtocolVersion {
		return fmt.Errorf("%w: server speaks protocol version %d", ErrAdmit, v)
	}
	if resp.GetMode() != spec.ModeHERD {
		return fmt.Errorf("%w: server serves %q, not %s", ErrAdmit, resp.GetMode(), spec.ModeHERD)
	}
	n := hi - lo
	srv := resp.GetServerConnQps()
	if len(srv) != n || len(resp.GetRemoteAddr()) != n || len(resp.GetRkey()) != n || resp.GetWindow() == 0 ||
		len(resp.GetAnswerQps()) == 0 || resp.GetAnswerQkey() == 0 {
		return fmt.Errorf("%w: malformed herd grant (%d server QPs, %d addresses, %d keys for %d QPs, window %d, %d answer QPs)",
			ErrAdmit, len(srv), len(resp.GetRemoteAddr()), len(resp.GetRkey()), n, resp.GetWindow(), len(resp.GetAnswerQps()))
	}
	for _, ep := range resp.GetAnswerQps() {
		t.AnswerQPNs = appendNew(t.AnswerQPNs, ep.GetQpn())
	}
	for i := lo; i < hi; i++ {
		var a verbs.Address
		if err := a.UnmarshalBinary(srv[i-lo].GetAddress()); err != nil {
			return fmt.Errorf("%w: server UC QP %d: %v", ErrAdmit, i-lo, err)
		}
		ip := a.GID.Addr()
		if !ip.Is4() {
			return fmt.Errorf("%w: server UC QP at %v: IPv4 only", ErrAdmit, a)
		}
		t.Flows[i] = FlowTarget{Server: netip.AddrPortFrom(ip, a.RoCEPort()), QPN: srv[i-lo].GetQpn(),
			Window: int(resp.GetWindow()), RemoteAddr: resp.GetRemoteAddr()[i-lo], RKey: resp.GetRkey()[i-lo],
			AnswerQKey: resp.GetAnswerQkey()}
	}
	return nil
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
		if _, err := ss.adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: ss.ids[i], SessionToken: tok, Epoch: ss.epoch}); err != nil {
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
	}
	return 0, fmt.Errorf("%w: mode %q (the wire generator speaks %s)", ErrAdmit, mode, spec.ModeList(spec.WireModes()))
}
