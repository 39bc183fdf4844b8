package pdfront

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/kvproto/pkg/pdpb"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqd/seqd/internal/lograte"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Config configures a Server.
type Config struct {
	// ClusterID is the PD cluster ID the front end reports; PD's client
	// refuses a zero one, and requests naming another are refused.
	ClusterID uint64
	// Name and URL describe the front end as PD's one member and leader
	// (URL as PD clients reach it, "http://host:port").
	Name, URL string
	// Peers are the URLs of other seqd-pd instances in front of the same
	// seqd group. GetMembers lists them as members (each instance names
	// itself the leader), so a PD client given every instance's address
	// keeps them all and moves to the next when its instance stops
	// answering, as it moves to a new PD leader.
	Peers []string
	// Timeout bounds one reservation (default 10s, above seqd's failover
	// time, so that a Tso request rides through a failover).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Stats are the front end's counters.
type Stats struct {
	Requests, Timestamps, Errors, Refused, Streams uint64
}

// Server serves pdpb.PD's GetMembers and Tso from a Source.
type Server struct {
	pdpb.UnimplementedPDServer
	cfg    Config
	src    Source
	log    *slog.Logger
	member *pdpb.Member
	peers  []*pdpb.Member

	mu    sync.Mutex // guards floor
	floor uint64     // the largest value answered

	requests, timestamps, errs, refused, streams atomic.Uint64
	handle, batch                                prometheus.Histogram

	warns *lograte.Limiter // one line per kind of warning per WarnEvery
}

// WarnEvery is how often a repeated warning (a failing reservation on
// every request while seqd is away) is logged; the next line says how
// many were suppressed.
const WarnEvery = 10 * time.Second

var _ pdpb.PDServer = (*Server)(nil)

// ErrConfig is a Config that cannot work.
var ErrConfig = errors.New("pdfront: bad config")

// New returns a Server over src.
func New(cfg Config, src Source) (*Server, error) {
	if cfg.ClusterID == 0 {
		return nil, errors.Join(ErrConfig, errors.New("cluster ID 0 (PD's client refuses it)"))
	}
	if cfg.URL == "" {
		return nil, errors.Join(ErrConfig, errors.New("no URL"))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Name == "" {
		cfg.Name = "seqd-pd"
	}
	s := &Server{cfg: cfg, src: src, log: cfg.Logger, member: member(cfg.Name, cfg.URL), warns: lograte.New(WarnEvery)}
	s.peers = []*pdpb.Member{s.member}
	for _, p := range cfg.Peers {
		if p != cfg.URL {
			s.peers = append(s.peers, member(p, p))
		}
	}
	s.handle, s.batch = newHistograms()
	return s, nil
}

// RegisterGRPC adds the PD service and the gRPC health service (SERVING) to g.
func (s *Server) RegisterGRPC(g *grpc.Server) {
	pdpb.RegisterPDServer(g, s)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{Requests: s.requests.Load(), Timestamps: s.timestamps.Load(), Errors: s.errs.Load(),
		Refused: s.refused.Load(), Streams: s.streams.Load()}
}

// Floor is the largest value answered.
func (s *Server) Floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor
}

func (s *Server) header() *pdpb.ResponseHeader {
	return &pdpb.ResponseHeader{ClusterId: s.cfg.ClusterID}
}

// member describes one front end; its ID is a hash of its URL.
func member(name, url string) *pdpb.Member {
	h := fnv.New64a()
	h.Write([]byte(url))
	return &pdpb.Member{Name: name, MemberId: h.Sum64() | 1, ClientUrls: []string{url}, PeerUrls: []string{url}}
}

// GetMembers names the front end as the leader and global TSO allocator,
// and lists it with its peers as the members.
func (s *Server) GetMembers(context.Context, *pdpb.GetMembersRequest) (*pdpb.GetMembersResponse, error) {
	return &pdpb.GetMembersResponse{Header: s.header(), Members: s.peers, Leader: s.member, EtcdLeader: s.member}, nil
}

// Tso answers each request on the stream in order, as PD does.
func (s *Server) Tso(stream pdpb.PD_TsoServer) error {
	s.streams.Add(1)
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.tso(ctx, req)
		if err != nil {
			s.errs.Add(1)
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// tso serves one request: a range from the source, checked against the
// floor, in PD's form.
func (s *Server) tso(ctx context.Context, req *pdpb.TsoRequest) (*pdpb.TsoResponse, error) {
	s.requests.Add(1)
	start := time.Now()
	if id := req.GetHeader().GetClusterId(); id != s.cfg.ClusterID {
		return nil, status.Errorf(codes.FailedPrecondition, "mismatch cluster id, need %d but got %d", s.cfg.ClusterID, id)
	}
	count := int(req.GetCount())
	if count < 1 || count > MaxCount {
		return nil, status.Errorf(codes.InvalidArgument, "count %d out of 1..%d", count, MaxCount)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	floor := s.Floor() // every value answered before this request arrived
	last, err := s.src.Reserve(ctx, count)
	if err != nil {
		if ok, n := s.warns.Allow("reserve"); ok {
			s.log.Warn("seqd-pd: reservation failed", "count", count, "err", err, "suppressed", n)
		}
		return nil, status.Errorf(codes.Unavailable, "seqd: %v", err)
	}
	if first := last - uint64(count) + 1; last < uint64(count) || first <= floor {
		s.refused.Add(1)
		if ok, n := s.warns.Allow("floor"); ok {
			s.log.Error("seqd-pd: refused a range at or below the floor", "first", first, "last", last, "floor", floor, "suppressed", n)
		}
		return nil, status.Errorf(codes.Internal, "range ending at %d for %d values is not above %d", last, count, floor)
	}
	s.mu.Lock()
	s.floor = max(s.floor, last)
	s.mu.Unlock()
	s.timestamps.Add(uint64(count))
	s.observe(start, count)
	p, l := split(last, count)
	return &pdpb.TsoResponse{Header: s.header(), Count: uint32(count),
		Timestamp: &pdpb.Timestamp{Physical: p, Logical: l}}, nil
}
