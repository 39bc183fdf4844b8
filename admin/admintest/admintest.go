// Package admintest provides an in-memory admin.Backend and a helper that
// runs an admin server on loopback, for tests of the admin plane and of its
// clients (seqctl, the client library).
package admintest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// Backend is an in-memory admin.Backend. It admits every valid request,
// assigning client QPs round-robin to its server QPs, and tracks sessions.
// Its zero value is not usable; call NewBackend.
type Backend struct {
	mu       sync.Mutex
	status   *adminpb.StatusResponse
	err      error
	next     uint64
	sessions map[uint64]string
	connects []*adminpb.ConnectRequest
}

var _ admin.Backend = (*Backend)(nil)

// NewBackend returns a Backend whose Status reports st (with sessions
// filled in from its own count). A nil st reports a small fixed status.
func NewBackend(st *adminpb.StatusResponse) *Backend {
	if st == nil {
		st = &adminpb.StatusResponse{
			Version:       "test",
			Mode:          spec.ModeSpecS0,
			Format:        "hybrid",
			Current:       1000,
			PersistedMark: 2000,
			Epoch:         7,
		}
	}
	return &Backend{status: proto.Clone(st).(*adminpb.StatusResponse), next: 1, sessions: map[uint64]string{}}
}

// Fail makes every later call fail with err; Fail(nil) undoes it.
func (b *Backend) Fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

// Sessions returns the number of live sessions.
func (b *Backend) Sessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

// Connects returns copies of the ConnectRequests that reached the backend.
func (b *Backend) Connects() []*adminpb.ConnectRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*adminpb.ConnectRequest, len(b.connects))
	for i, r := range b.connects {
		out[i] = proto.Clone(r).(*adminpb.ConnectRequest)
	}
	return out
}

// Connect admits the client.
func (b *Backend) Connect(_ context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.connects = append(b.connects, proto.Clone(req).(*adminpb.ConnectRequest))
	if b.err != nil {
		return nil, b.err
	}
	id := b.next
	b.next++
	b.sessions[id] = req.GetClientName()
	server := []*adminpb.Endpoint{
		{Address: make([]byte, 20), Qpn: 0x100},
		{Address: make([]byte, 20), Qpn: 0x101},
	}
	assign := make([]uint32, len(req.GetQps()))
	for i := range assign {
		assign[i] = uint32(i % len(server))
	}
	mode := req.GetMode()
	if mode == "" {
		mode = b.status.GetMode()
	}
	return &adminpb.ConnectResponse{
		SessionId:       id,
		Mode:            mode,
		Format:          b.status.GetFormat(),
		Qkey:            0x11111111,
		ServerQps:       server,
		Assignment:      assign,
		Window:          req.GetWindow(),
		High:            b.status.GetCurrent(),
		ProtocolVersion: spec.ProtocolVersion,
		Epoch:           b.status.GetEpoch(),
	}, nil
}

// Disconnect releases a session, or fails with admin.ErrUnknownSession.
func (b *Backend) Disconnect(_ context.Context, req *adminpb.DisconnectRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	if _, ok := b.sessions[req.GetSessionId()]; !ok {
		return fmt.Errorf("%w: session %d", admin.ErrUnknownSession, req.GetSessionId())
	}
	delete(b.sessions, req.GetSessionId())
	return nil
}

// Status reports the status given to NewBackend with the live session count.
func (b *Backend) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := proto.Clone(b.status).(*adminpb.StatusResponse)
	st.Sessions = uint64(len(b.sessions))
	return st, nil
}

// Start runs an admin server over backend on 127.0.0.1 with an OS-chosen
// port, and stops it when the test ends. It returns the server and the
// address to dial; the listener is open before Start returns, so a client
// may connect at once. cfg.Addr is ignored.
func Start(tb testing.TB, cfg admin.Config, backend admin.Backend) (*admin.Server, string) {
	tb.Helper()
	srv, err := admin.New(cfg, backend)
	if err != nil {
		tb.Fatalf("admintest: new server: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("admintest: listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	tb.Cleanup(func() {
		srv.Stop()
		// Stop may win the race with Serve, which then reports
		// ErrServerStopped: that is a clean stop too.
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tb.Errorf("admintest: serve: %v", err)
		}
	})
	return srv, lis.Addr().String()
}

// Client dials the admin API at addr (adminclient.Dial) and returns a client of
// it; the connection is closed when the test ends. A failed dial fails
// the test.
func Client(ctx context.Context, tb testing.TB, addr string) adminpb.AdminClient {
	tb.Helper()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}
