package haserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestWrongQKeyNoAnswer: the leader hands out a random Q_Key at Connect;
// a request from the admitted QP with that Q_Key is answered, the same
// request with any other Q_Key gets no answer and is counted as a drop.
func TestWrongQKeyNoAnswer(t *testing.T) {
	c := hatest.Start(t, 1)
	in := start(t, c.Endpoints())
	waitLeader(t, in)

	dev, err := verbs.Open("soft", "127.0.0.1:0", verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cli := verbstest.NewEnd(t, dev, verbs.UD)
	a, _ := cli.QP.Address().MarshalBinary()
	// The client learns the Q_Key only from Connect: bring the QP up
	// with it afterwards.
	resp, err := in.srv.Connect(context.Background(), &adminpb.ConnectRequest{
		Qps: []*adminpb.Endpoint{{Address: a, Qpn: uint32(cli.QP.QPN())}}, Window: 8, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	qkey := resp.GetQkey()
	if qkey == verbs.DefaultQKey || qkey == 0 || qkey&0x80000000 != 0 {
		t.Fatalf("Q_Key %#x: want a random one, not the default", qkey)
	}
	// Requests carry qkey; answers carry the session's own answer Q_Key.
	if err := verbs.BringUpUD(cli.QP, resp.GetAnswerQkey(), 0); err != nil {
		t.Fatal(err)
	}
	srv := resp.GetServerQps()[resp.GetAssignment()[0]]
	var dst verbs.Address
	dst.UnmarshalBinary(srv.GetAddress())
	ah := verbstest.AH(t, cli, dst)
	send := func(tag spec.Tag, key uint32) {
		wr := []verbs.SendWR{{ID: 1, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled,
			Imm: uint32(spec.MustRequestImm(tag, spec.NoGuess)), AH: ah, RemoteQPN: verbs.QPN(srv.GetQpn()), RemoteQKey: key}}
		if _, err := cli.QP.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		verbstest.PostRecv(t, cli.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(cli.MR, i*64, 64)})
	}
	badQKeyDrops := func() uint64 {
		var n uint64
		if cs, ok := in.dev.(verbs.Counters); ok {
			cs.VisitCounters(func(name string, v uint64) {
				if name == verbs.CounterDropBadQKey {
					n = v
				}
			})
		}
		return n
	}
	before := badQKeyDrops()
	send(1, qkey^0x5a5a) // wrong Q_Key: dropped
	deadline := time.Now().Add(5 * time.Second)
	for badQKeyDrops() == before {
		if time.Now().After(deadline) {
			t.Fatal("the wrong-Q_Key request was not counted as a drop")
		}
		time.Sleep(time.Millisecond)
	}
	// Right Q_Key: answered. A request the server dropped for its age (a
	// loaded machine descheduled the worker past MaxResidence) is sent
	// again under the next tag, as a client does.
	wc := make([]verbs.WC, 1)
	for tag := spec.Tag(2); ; tag++ {
		if time.Now().After(deadline) || tag > 3 {
			t.Fatal("the right-Q_Key request was never answered")
		}
		send(tag, qkey)
		n, wait := 0, time.Now().Add(time.Second)
		for n == 0 && time.Now().Before(wait) {
			n, _ = cli.RecvCQ.Poll(wc)
			time.Sleep(time.Millisecond)
		}
		if n == 1 {
			break
		}
	}
	if tag := spec.Imm(wc[0].Imm).Tag(); tag == 1 {
		t.Fatal("answer for tag 1; the wrong-Q_Key request must get none")
	}
	// Nothing answers tag 1 (a resent request's late answer may still come).
	extra := make([]verbs.WC, 4)
	n, _ := cli.RecvCQ.Poll(extra)
	for _, wc := range extra[:n] {
		if spec.Imm(wc.Imm).Tag() == 1 {
			t.Fatal("the wrong-Q_Key request was answered")
		}
	}
}
