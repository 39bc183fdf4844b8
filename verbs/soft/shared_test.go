//go:build linux

package soft

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// randomLoopback returns an address in 127/8 other than 127.0.0.1, so that
// a test can bind the RoCEv2 port without meeting another test there.
func randomLoopback() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(250)), byte(rand.IntN(256)), byte(1 + rand.IntN(250))})
}

// TestSharedRoCEPort: a soft device on the RoCEv2 port with three queues
// listens on 4791 with every queue, as a NIC does; an address with Port 0
// means 4791; a peer that sends to six QPs through one AH (one UDP flow,
// as a NIC's QP does) reaches each QP on its own queue, and no packet
// lands on a queue that does not own its QP.
func TestSharedRoCEPort(t *testing.T) {
	ip := randomLoopback()
	srvDev, err := Open(netip.AddrPortFrom(ip, verbs.RoCEv2Port).String(), verbs.Options{"queues": "3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srvDev.Close() })
	d := srvDev.(*device)
	if !d.shared {
		t.Fatal("device on 4791 with 3 queues does not share the port")
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	cq, err := d.CreateCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	mr, err := pd.RegMR(64*64, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Close() })
	const nqp = 6
	var qps [nqp]verbs.QP
	for i := range qps {
		y, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { y.Close() })
		if err := verbs.BringUpUD(y, verbs.DefaultQKey, 0); err != nil {
			t.Fatal(err)
		}
		x := y.(*qp)
		if x.q.idx != int(x.qpn)%3 {
			t.Errorf("QP %v on queue %d, want %d", y.QPN(), x.q.idx, int(x.qpn)%3)
		}
		if a := y.Address(); a.Port != verbs.RoCEv2Port || a.GID.Addr() != ip {
			t.Errorf("QP %v address %v, want %v:4791", y.QPN(), a, ip)
		}
		for k := 0; k < 4; k++ {
			slot := i*8 + k
			sg := []verbs.SGE{{Addr: mr.Addr() + uint64(slot*64), Length: 64, LKey: mr.LKey()}}
			if _, err := y.PostRecv([]verbs.RecvWR{{ID: uint64(slot), SG: sg}}); err != nil {
				t.Fatal(err)
			}
		}
		qps[i] = y
	}

	cli := newUDEnd(t, nil, 64)
	ah, err := cli.pd.CreateAH(verbs.AHAttr{Dest: verbs.Address{GID: verbs.GIDFromAddr(ip)}}) // Port 0: 4791
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Close() })
	// Four to each QP, interleaved in pairs, in one chain: runs of two
	// packets to one QP, which may leave as one GSO message.
	var wrs []verbs.SendWR
	for k := 0; k < 4; k += 2 {
		for i := range qps {
			for j := k; j < k+2; j++ {
				wrs = append(wrs, verbs.SendWR{ID: uint64(len(wrs)), Opcode: verbs.OpSendWithImm, AH: ah,
					RemoteQPN: qps[i].QPN(), RemoteQKey: verbs.DefaultQKey, Imm: uint32(i<<8 | j)})
			}
		}
	}
	if n, err := cli.qp.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatal(n, err)
	}
	got := map[verbs.QPN][]uint32{}
	wc := make([]verbs.WC, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for n := 0; n < len(wrs); {
		k, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", w)
			}
			got[w.QPN] = append(got[w.QPN], w.Imm)
		}
		n += k
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				v, _ := deviceCounter(d, verbs.CounterDropUnknownQPN)
				t.Fatalf("%d of %d arrived (%d dropped as unknown QPN): %v", n, len(wrs), v, err)
			}
		}
	}
	for i, y := range qps {
		want := fmt.Sprint([]uint32{uint32(i << 8), uint32(i<<8 | 1), uint32(i<<8 | 2), uint32(i<<8 | 3)})
		if g := fmt.Sprint(got[y.QPN()]); g != want {
			t.Errorf("QP %v received %s, want %s", y.QPN(), g, want)
		}
	}
	if v := d.ctr.dropQPN.Load(); v != 0 {
		t.Errorf("%d packets reached a queue that does not own their QP", v)
	}
}

func deviceCounter(d *device, name string) (uint64, bool) {
	var v uint64
	found := false
	d.VisitCounters(func(n string, x uint64) {
		if n == name {
			v, found = x, true
		}
	})
	return v, found
}

// TestPostManyFallback: on a provider without verbs.ManyPoster, PostMany
// posts each receive chain and then the sends, and reports what it
// posted: here receives on two QPs and, in the same call, the sends that
// fill them.
func TestPostManyFallback(t *testing.T) {
	e := newUDEnd(t, nil, 8)
	y, err := e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { y.Close() })
	if err := verbs.BringUpUD(y, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	ah, err := e.pd.CreateAH(verbs.AHAttr{Dest: e.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Close() })
	sg := func(i int) []verbs.SGE {
		return []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*64), Length: 64, LKey: e.mr.LKey()}}
	}
	chains := []verbs.RecvChain{{QP: e.qp, WRs: []verbs.RecvWR{{ID: 1, SG: sg(1)}}}, {QP: y, WRs: []verbs.RecvWR{{ID: 2, SG: sg(2)}}}}
	sends := []verbs.SendWR{
		{ID: 10, Opcode: verbs.OpSendWithImm, Imm: 100, AH: ah, RemoteQPN: e.qp.QPN(), RemoteQKey: verbs.DefaultQKey},
		{ID: 11, Opcode: verbs.OpSendWithImm, Imm: 200, AH: ah, RemoteQPN: y.QPN(), RemoteQKey: verbs.DefaultQKey}}
	ns, err := verbs.PostMany(e.dev, chains, e.qp, sends)
	if err != nil || ns != 2 || chains[0].Posted != 1 || chains[1].Posted != 1 {
		t.Fatalf("PostMany = %d, %v; posted %d, %d", ns, err, chains[0].Posted, chains[1].Posted)
	}
	got := map[uint64]uint32{}
	wc := make([]verbs.WC, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < 2 {
		n, err := e.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.Opcode == verbs.WCRecv && w.Status == verbs.WCSuccess {
				got[w.ID] = w.Imm
			}
		}
		if n == 0 {
			if err := e.cq.Wait(ctx); err != nil {
				t.Fatalf("received %v: %v", got, err)
			}
		}
	}
	if got[1] != 100 || got[2] != 200 {
		t.Errorf("receives %v, want RECV 1 imm 100 and RECV 2 imm 200", got)
	}
}
