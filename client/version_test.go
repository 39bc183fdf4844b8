package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/spec"
)

// otherVersion answers Connect as a server of another protocol version.
type otherVersion struct{ *admintest.Backend }

func (b otherVersion) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	resp, err := b.Backend.Connect(ctx, req)
	if resp != nil {
		resp.ProtocolVersion = spec.ProtocolVersion + 1
		// Well formed otherwise, also where the session rules add fields
		// (an answer Q_Key and the answering QPs), so that the version is
		// what the client refuses.
		m := resp.ProtoReflect()
		if fd := m.Descriptor().Fields().ByName("answer_qkey"); fd != nil {
			m.Set(fd, protoreflect.ValueOfUint32(0x22222222))
		}
		if fd := m.Descriptor().Fields().ByName("answer_qps"); fd != nil {
			l := m.Mutable(fd).List()
			for _, ep := range resp.GetServerQps() {
				l.Append(protoreflect.ValueOfMessage(ep.ProtoReflect()))
			}
		}
	}
	return resp, err
}

// TestConnectChecksProtocolVersion: the client refuses a Connect reply
// whose protocol_version is not the one it speaks (PROTOCOL.md, "Control
// plane"); a server of version 1 admits a client that asks for a higher
// version and answers 1, so only the client can tell.
func TestConnectChecksProtocolVersion(t *testing.T) {
	_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, otherVersion{admintest.NewBackend(nil)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err == nil {
		c.Close()
		t.Fatal("connected to a server of protocol version 2")
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("protocol version %d", spec.ProtocolVersion+1)) {
		t.Fatalf("Dial = %v, want a protocol version refusal", err)
	}
}
