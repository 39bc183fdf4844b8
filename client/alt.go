package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/atomics"
	"github.com/seqd/seqd/herd"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// altConn is the data path of the modes other than Spec-S0 (herd,
// atomics), as the engine drives it. herd.Conn and atomics.Conn implement
// it through the adapters below.
type altConn interface {
	Free() int
	Outstanding() int
	Send(now time.Duration, ids []int) (int, error)
	// poll moves answers into ids/vals (failed requests: ok false).
	poll(now time.Duration, ids []int, vals []uint64, ok []bool) int
	Expire(now time.Duration) int
	NextDeadline() (time.Duration, bool)
	CQ() verbs.CQ
	Broken() bool
	Cancel(id int)
	Close() error
}

type herdAlt struct {
	*herd.Conn
	res    []herd.Result
	forged *atomic.Uint64 // the client's Stats.Forged
	seen   uint64         // Conn.Forged already added to it
}

func (h *herdAlt) poll(now time.Duration, ids []int, vals []uint64, ok []bool) int {
	n := h.Conn.Poll(now, h.res[:min(len(h.res), len(ids))])
	if f := h.Conn.Forged; f != h.seen {
		h.forged.Add(f - h.seen)
		h.seen = f
	}
	for i, r := range h.res[:n] {
		ids[i], vals[i], ok[i] = r.ID, r.Value, true
	}
	return n
}

func (h *herdAlt) Broken() bool { return false }

type atomicsAlt struct {
	*atomics.Conn
	res []atomics.Result
}

func (a *atomicsAlt) poll(now time.Duration, ids []int, vals []uint64, ok []bool) int {
	n := a.Conn.Poll(now, a.res[:min(len(a.res), len(ids))])
	for i, r := range a.res[:n] {
		ids[i], vals[i], ok[i] = r.ID, r.Value, r.Err == nil
	}
	return n
}

func (a *atomicsAlt) Expire(time.Duration) int                       { return 0 } // RC retransmits
func (a *atomicsAlt) NextDeadline() (time.Duration, bool)            { return 0, false }
func (a *atomicsAlt) Cancel(int)                                     {}
func (a *atomicsAlt) Send(now time.Duration, ids []int) (int, error) { return a.Conn.Send(now, ids) }

// connectAlt admits the client in mode (herd or atomics) with fresh QPs.
func (c *Client) connectAlt(ctx context.Context, mode string) error {
	o := &c.opts
	req := &adminpb.ConnectRequest{Window: uint32(o.window), Mode: mode, ClientName: o.name, ProtocolVersion: spec.ProtocolVersion,
		Replaces: c.replaces()}
	ep := func(a verbs.Address, q verbs.QPN) *adminpb.Endpoint {
		b, _ := a.MarshalBinary()
		return &adminpb.Endpoint{Address: b, Qpn: uint32(q)}
	}
	var alt altConn
	switch mode {
	case spec.ModeHERD:
		hc, err := herd.NewConn(c.pd, c.dev, o.qps, min(o.window, spec.HERDMaxWindow), o.retransmit)
		if err != nil {
			return fmt.Errorf("client: herd QPs: %w", err)
		}
		for _, q := range hc.QPs() {
			req.Qps = append(req.Qps, ep(q.Recv.Addr, q.Recv.QPN))
			req.ConnQps = append(req.ConnQps, ep(q.Write.Addr, q.Write.QPN))
		}
		req.Window = uint32(min(o.window, spec.HERDMaxWindow))
		resp, err := c.adm.Connect(ctx, req)
		if err == nil {
			err = checkVersion(resp)
		}
		if err == nil {
			err = attachHERD(hc, resp)
		}
		if err != nil {
			hc.Close()
			return err
		}
		alt = &herdAlt{Conn: hc, res: make([]herd.Result, 64), forged: &c.st.forged}
		c.setSession(resp)
	case spec.ModeAtomics:
		ac, err := atomics.NewConn(c.pd, c.dev, o.qps, o.window)
		if err != nil {
			return fmt.Errorf("client: atomics QPs: %w", err)
		}
		for _, q := range ac.QPs() {
			req.Qps = append(req.Qps, ep(q.Addr, q.QPN))
		}
		resp, err := c.adm.Connect(ctx, req)
		if err == nil {
			err = checkVersion(resp)
		}
		if err == nil {
			err = attachAtomics(ac, resp)
		}
		if err != nil {
			ac.Close()
			return err
		}
		alt = &atomicsAlt{Conn: ac, res: make([]atomics.Result, 64)}
		c.setSession(resp)
	default:
		return fmt.Errorf("%w: the server runs mode %q, which this client does not speak", ErrUnavailable, mode)
	}
	c.closeAlt()
	c.alt, c.mode = alt, mode
	c.modeV.Store(mode)
	c.altReqs = make([]*Request, o.qps*o.window)
	return nil
}

// setSession records the session a Connect just granted.
func (c *Client) setSession(resp *adminpb.ConnectResponse) {
	c.session, c.token, c.epoch = resp.GetSessionId(), resp.GetSessionToken(), resp.GetEpoch()
	c.dataIP = serverDataIP(resp)
	c.publishLease(resp)
}

// replaces is what the next Connect names in ConnectRequest.replaces:
// the token of the session last granted, or before the first grant the
// client's own handle.
func (c *Client) replaces() []byte {
	if len(c.token) != 0 {
		return c.token
	}
	return c.handle
}

// disconnectReq releases the current session: by its token, which names
// only that session.
func (c *Client) disconnectReq() *adminpb.DisconnectRequest {
	return &adminpb.DisconnectRequest{SessionId: c.session, SessionToken: c.token, Epoch: c.epoch}
}

func attachHERD(hc *herd.Conn, resp *adminpb.ConnectResponse) error {
	n := len(resp.GetServerConnQps())
	if len(resp.GetRemoteAddr()) != n || len(resp.GetRkey()) != n || resp.GetWindow() == 0 {
		return fmt.Errorf("%w: connect: malformed herd answer", ErrUnavailable)
	}
	if len(resp.GetAnswerQps()) == 0 || resp.GetAnswerQkey() == 0 {
		return fmt.Errorf("%w: connect: herd answer without answer QPs or answer Q_Key", ErrUnavailable)
	}
	from, err := senders(resp.GetAnswerQps())
	if err != nil {
		return err
	}
	g := herd.Grant{Session: resp.GetSessionId(), QKey: resp.GetAnswerQkey(), Window: int(resp.GetWindow()), Epoch: resp.GetEpoch(),
		AnswerFrom: from}
	for i, e := range resp.GetServerConnQps() {
		var a verbs.Address
		if err := a.UnmarshalBinary(e.GetAddress()); err != nil {
			return fmt.Errorf("%w: connect: server_conn_qps[%d]: %v", ErrUnavailable, i, err)
		}
		g.QPs = append(g.QPs, herd.QPGrant{Server: herd.Endpoint{Addr: a, QPN: verbs.QPN(e.GetQpn())},
			Addr: resp.GetRemoteAddr()[i], RKey: resp.GetRkey()[i]})
	}
	return hc.Attach(g)
}

// senders decodes the server's response QPs (ConnectResponse.answer_qps).
func senders(eps []*adminpb.Endpoint) (verbs.Senders, error) {
	out := make(verbs.Senders, len(eps))
	for i, e := range eps {
		var a verbs.Address
		if err := a.UnmarshalBinary(e.GetAddress()); err != nil {
			return nil, fmt.Errorf("%w: connect: answer_qps[%d]: %v", ErrUnavailable, i, err)
		}
		out[i] = verbs.SenderOf(a, verbs.QPN(e.GetQpn()))
	}
	return out, nil
}

func attachAtomics(ac *atomics.Conn, resp *adminpb.ConnectResponse) error {
	if len(resp.GetRemoteAddr()) != 1 || len(resp.GetRkey()) != 1 {
		return fmt.Errorf("%w: connect: malformed atomics answer", ErrUnavailable)
	}
	g := atomics.Grant{Session: resp.GetSessionId(), Addr: resp.GetRemoteAddr()[0], RKey: resp.GetRkey()[0], Epoch: resp.GetEpoch()}
	for _, p := range resp.GetConnPsns() {
		g.PSNs = append(g.PSNs, verbs.PSN(p))
	}
	for i, e := range resp.GetServerConnQps() {
		var a verbs.Address
		if err := a.UnmarshalBinary(e.GetAddress()); err != nil {
			return fmt.Errorf("%w: connect: server_conn_qps[%d]: %v", ErrUnavailable, i, err)
		}
		g.Server = append(g.Server, atomics.Endpoint{Addr: a, QPN: verbs.QPN(e.GetQpn())})
	}
	return ac.Attach(g)
}

// closeAlt drops the alt data path; its in-flight requests go back to the
// front of the backlog, to be sent again on the next data path. Their
// answers, if any still come, land on closed QPs.
func (c *Client) closeAlt() {
	if c.alt == nil {
		return
	}
	for i := len(c.altReqs) - 1; i >= 0; i-- {
		if r := c.altReqs[i]; r != nil {
			c.altReqs[i] = nil
			c.pushFront(r)
		}
	}
	c.alt.Close()
	c.alt = nil
}

// requeueS0 takes every Spec-S0 request in flight back to the backlog
// (leaving Spec-S0 for another mode).
func (c *Client) requeueS0(now time.Duration) {
	for _, q := range c.qps {
		for t, r := range q.inflight {
			if r != nil {
				q.win.Cancel(now, spec.Tag(t))
				q.inflight[t] = nil
				c.pushFront(r)
			}
		}
	}
}

// altStep is one engine round in herd or atomics mode.
func (c *Client) altStep(now time.Duration) bool {
	a := c.alt
	did := false
	n := a.poll(now, c.altIDs, c.altVals, c.altOK)
	for i := range n {
		id := c.altIDs[i]
		r := c.altReqs[id]
		c.altReqs[id] = nil
		if r == nil {
			continue
		}
		did = true
		if !c.altOK[i] {
			c.st.retransmits.Add(1)
			c.pushFront(r) // the QP failed: resent after reconnecting
			continue
		}
		c.lastAns = now
		c.accept(r, c.altVals[i])
	}
	if x := a.Expire(now); x > 0 {
		c.st.retransmits.Add(uint64(x))
	}
	// Give up on requests whose callers did.
	for id, r := range c.altReqs {
		if r != nil && (r.abandoned.Load() || now >= r.deadline) {
			a.Cancel(id)
			c.altReqs[id] = nil
			c.st.timeouts.Add(1)
			c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
		}
	}
	for c.backlog != nil {
		r := c.backlog
		if !r.abandoned.Load() && now < r.deadline {
			break
		}
		c.popFront()
		c.st.timeouts.Add(1)
		c.finish(r, 0, fmt.Errorf("%w: no answer before the deadline", ErrTimeout))
	}
	for c.backlog != nil && a.Free() > 0 && !a.Broken() {
		k := 0
		for r := c.backlog; r != nil && k < min(a.Free(), len(c.altIDs)); r = r.next {
			k++
		}
		sent, err := a.Send(now, c.altIDs[:k])
		for _, id := range c.altIDs[:sent] {
			r := c.popFront()
			c.altReqs[id] = r
		}
		if sent > 0 {
			c.st.doorbells.Add(1)
			did = true
		}
		if err != nil || sent == 0 {
			break
		}
	}
	return did
}

// accept hands out v for r, unless it would go backwards.
func (c *Client) accept(r *Request, v uint64) {
	if v <= r.floor {
		c.st.regressions.Add(1)
		c.log.Error("server answered a value not above one already returned", "value", v, "floor", r.floor, "mode", c.mode)
		c.finish(r, 0, fmt.Errorf("%w: %d <= %d", ErrRegression, v, r.floor))
		return
	}
	for {
		m := c.maxRet.Load()
		if v <= m || c.maxRet.CompareAndSwap(m, v) {
			break
		}
	}
	c.st.answers.Add(1)
	c.finish(r, Timestamp(v), nil)
}

// checkVersion refuses a Connect reply of another protocol version: a
// server admits a client asking for a higher version than its own, so only
// the client can tell (PROTOCOL.md, "Connecting: what the fields mean").
func checkVersion(resp *adminpb.ConnectResponse) error {
	if v := resp.GetProtocolVersion(); v != spec.ProtocolVersion {
		return fmt.Errorf("%w: connect: the server speaks protocol version %d, this client %d", ErrUnavailable, v, spec.ProtocolVersion)
	}
	return nil
}
