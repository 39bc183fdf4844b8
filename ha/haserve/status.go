package haserve

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// What every member's Status shows, so that an operator sees the whole
// group (seqctl members): its own role, version and format, the leader's
// term, and the epoch and mode the leader serves in. A standby has no
// data path and so no epoch of its own: the leader publishes its epoch in
// etcd (servingKey, a write guarded by its term's election key like the
// mark) when its term starts and after each SetMode, and a standby reads
// it back together with the leader's election key, reporting the epoch
// only when it belongs to the term etcd names now.

// serving is the record a leader publishes under servingKey.
type serving struct {
	Term   int64  `json:"term"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	Mode   string `json:"mode"`
}

func (s *Server) servingKey() string {
	return strings.TrimRight(s.node.Config().Prefix, "/") + "/serving"
}

func (s *Server) electionPrefix() string {
	return strings.TrimRight(s.node.Config().Prefix, "/") + "/election/"
}

// publish writes c's epoch and mode for the standbys' Status. It is for
// operators only: a failure is logged, and the standbys report epoch 0
// until a later publish succeeds.
func (s *Server) publish(ctx context.Context, c *term, epoch uint64, mode string) {
	cli := s.node.Client()
	if cli == nil {
		return
	}
	b, err := json.Marshal(serving{Term: c.t.Rev, Leader: s.node.Config().Advertise, Epoch: epoch, Mode: mode})
	if err != nil { // cannot happen: plain fields
		return
	}
	pctx, cancel := context.WithTimeout(ctx, s.node.Config().DialTimeout)
	defer cancel()
	resp, err := cli.Txn(pctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.t.Key), "=", c.t.Rev)).
		Then(clientv3.OpPut(s.servingKey(), string(b))).
		Commit()
	switch {
	case err != nil:
		s.log.Warn("haserve: publishing the epoch for the standbys' status failed", "term", c.t.Rev, "err", err)
	case !resp.Succeeded:
		s.log.Info("haserve: epoch not published: the term's election key is gone", "term", c.t.Rev)
	}
}

// format is the format this instance's oracle runs (and a standby would
// start a term in).
func (s *Server) format() spec.Format {
	if f := s.cfg.Oracle.Format; f != 0 {
		return f
	}
	return spec.FormatHybrid
}

// standbyStatus is the Status of an instance that does not serve: its own
// version and format, and from etcd the leader's term and the epoch and
// mode it published for it (groupView); its own mode until it knows them. etcd out of reach leaves those as last
// read, zero before any read: Status still answers at once, as the admin
// plane of a standby must.
func (s *Server) standbyStatus(ctx context.Context) *adminpb.StatusResponse {
	st := &adminpb.StatusResponse{Version: s.cfg.Modes.Version, Format: s.format().String(), Mode: s.currentMode(),
		Role: adminclient.RoleStandby, Leader: s.otherLeader()}
	if v := s.groupView(ctx); v != nil {
		st.Term, st.Epoch = uint64(v.term), v.epoch
		if v.mode != "" {
			st.Mode = v.mode // the group's: the mode a term starts in
		}
	}
	return st
}

// A groupView is the leader's term and published epoch as a standby last
// read them from etcd.
type groupView struct {
	term  int64
	epoch uint64 // 0 when the leader has not published one for term
	mode  string // the mode the leader published with epoch
	at    time.Time
}

// Status must answer at once, a standby's too (clients ask it before
// Connect while they look for the leader): the etcd read is bounded by
// viewReadTimeout, one at a time, and its result serves the Status calls
// of the next viewMaxAge; on an etcd error the last view stands.
const (
	viewMaxAge      = 100 * time.Millisecond
	viewReadTimeout = 250 * time.Millisecond
)

// groupView returns the leader's term and epoch from etcd, or the last
// view when it is recent, another Status is reading, or etcd does not
// answer in time; nil before any read succeeded.
func (s *Server) groupView(ctx context.Context) *groupView {
	v := s.view.Load()
	if v != nil && time.Since(v.at) < viewMaxAge {
		return v
	}
	cli := s.node.Client()
	if cli == nil || !s.viewMu.TryLock() {
		return v
	}
	defer s.viewMu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, min(viewReadTimeout, s.node.Config().DialTimeout))
	defer cancel()
	resp, err := cli.Txn(gctx).Then(
		clientv3.OpGet(s.electionPrefix(), clientv3.WithFirstCreate()...),
		clientv3.OpGet(s.servingKey()),
	).Commit()
	if err != nil || len(resp.Responses) != 2 {
		s.log.Debug("haserve: standby status without etcd", "err", err)
		return v
	}
	nv := &groupView{at: time.Now()}
	if lk := resp.Responses[0].GetResponseRange().GetKvs(); len(lk) > 0 {
		nv.term = lk[0].CreateRevision
		var rec serving
		if sk := resp.Responses[1].GetResponseRange().GetKvs(); len(sk) == 1 && json.Unmarshal(sk[0].Value, &rec) == nil && rec.Term == nv.term {
			nv.epoch, nv.mode = rec.Epoch, rec.Mode
		}
	}
	s.view.Store(nv)
	return nv
}
