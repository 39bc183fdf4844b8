package headeronly

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// TestSessionQueuesChurnUnderTraffic connects and disconnects sessions
// whose QPs are sending (so completions of a session's request QP can be
// in the worker's CQ, or in a batch, when Disconnect retires it) while a
// stable client keeps calling. Run with -race: the admin plane creates
// and hands over the queues, only the worker touches and destroys them.
// Every call of the stable client is answered, a request sent to a
// retired queue is never answered, and once the churn is over every
// session queue is destroyed.
func TestSessionQueuesChurnUnderTraffic(t *testing.T) {
	s := newServer(t, &fakeOracle{})
	ctx := context.Background()
	connect := func(c *rawClient) (*adminpb.ConnectResponse, verbs.Address, verbs.QPN) {
		t.Helper()
		resp, err := pb(s).Connect(ctx, &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{c.endpoint()}, Window: 8, ProtocolVersion: spec.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		c.qkey, c.ansQKey = resp.GetQkey(), resp.GetAnswerQkey()
		ep := resp.GetServerQps()[resp.GetAssignment()[0]]
		var a verbs.Address
		if err := a.UnmarshalBinary(ep.GetAddress()); err != nil {
			t.Fatal(err)
		}
		return resp, a, verbs.QPN(ep.GetQpn())
	}
	stable := newRawClient(t, 0x5000)
	_, sa, sq := connect(stable)
	churn := newRawClient(t, 0x5001)
	const cycles = 300
	var tag spec.Tag
	var lastA verbs.Address
	var lastQ verbs.QPN
	for i := range cycles {
		resp, a, q := connect(churn)
		lastA, lastQ = a, q
		for k := range spec.Tag(8) { // a full window, not waited for
			imm, _ := spec.RequestImm(k, spec.NoGuess)
			churn.send(a, q, imm, rocev2.DefaultPKey, 0)
		}
		if err := pb(s).Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: resp.GetSessionId(), SessionToken: resp.GetSessionToken(),
			Epoch: resp.GetEpoch()}); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%10 != 0 {
			continue
		}
		// The stable client is served, retransmitting (a fresh tag) if a
		// request was dropped for its age on this loaded machine.
		for try := 0; ; try++ {
			tag = (tag + 1) % spec.NumTags
			imm, _ := spec.RequestImm(tag, spec.NoGuess)
			stable.send(sa, sq, imm, rocev2.DefaultPKey, 0)
			if a, ok := stable.recv(time.Second); ok && spec.Imm(a.pk.Imm).Tag() == tag {
				break
			}
			if try == 5 {
				t.Fatalf("cycle %d: the stable client got no answer in 6 tries", i)
			}
		}
	}
	live := func() (n int64) {
		for _, w := range s.Workers {
			n += w.rqLive.Load()
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for live() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d session receive queues live after the churn, want 1 (the stable client's)", live())
		}
		time.Sleep(time.Millisecond)
	}
	// Drain the answers of the churning sessions; then a request to the
	// last one's request QP, destroyed, is never answered.
	buf := make([]byte, 2048)
	for {
		churn.conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := churn.conn.Read(buf); err != nil {
			break
		}
	}
	served := s.totals().Requests
	imm, _ := spec.RequestImm(100, spec.NoGuess)
	churn.send(lastA, lastQ, imm, rocev2.DefaultPKey, 0)
	churn.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := churn.conn.Read(buf); err == nil {
		t.Fatalf("a request to a destroyed session queue was answered: %x", buf[:n])
	}
	if got := s.totals().Requests; got != served {
		t.Fatalf("served %d requests after the last session left, want 0", got-served)
	}
}
