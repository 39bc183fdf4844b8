package soft

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// BenchmarkRxUD measures the receive path of header-only UD
// SEND_WITH_IMMs without the socket, per packet, as a burst meets them: a
// GRO super-packet of 64 from one sender (ICRC check, decode, QP lookup,
// RECV consumption, GRH write and completion), plus the poll and re-post
// that a server does per packet.
func BenchmarkRxUD(b *testing.B) {
	srv := newUDEnd(b, nil, 256)
	src := newUDEnd(b, nil, 1)
	rwr := make([]verbs.RecvWR, 256)
	sg := make([]verbs.SGE, 256)
	srv.postRecvs(b, rwr, sg, 0, 256)
	x := srv.qp.(*qp)
	q := x.q
	from := src.qp.(*qp).q.local
	f := rocev2.Flow{Src: from.Addr().As4(), Dst: q.local.Addr().As4(), SrcPort: from.Port(), DstPort: q.local.Port(), FlagsFrag: 0x4000}
	var u rocev2.UDImmICRC
	buf := make([]byte, 64*rocev2.UDImmLen)
	for i := 0; i < 64; i++ {
		u.Put(buf[i*rocev2.UDImmLen:], f.Prefix(rocev2.UDImmLen), x.qpn, uint32(i), verbs.DefaultQKey, 0x999, uint32(i*7))
	}
	wc := make([]verbs.WC, 64)
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		q.rxMu.Lock()
		q.rxDst = q.ip // what burst sets per datagram
		if n := q.inputUDImmRun(buf, from.Addr().As4(), from.Port()); n != 64 {
			b.Fatalf("%d packets", n)
		}
		q.unlockRQ()
		q.flushPend()
		q.rxMu.Unlock()
		n := srv.cq.(*cq).take(wc)
		if n != 64 || wc[0].Status != verbs.WCSuccess {
			b.Fatalf("%d completions, %+v", n, wc[0])
		}
		srv.postRecvs(b, rwr, sg, next, n)
		next = (next + n) % 256
	}
}

// BenchmarkTxUD measures PostSend of a 64-WR chain of header-only UD
// SEND_WITH_IMMs (validation, encode, ICRC, GSO message build), per WR,
// and of a chain of one (a serial caller's),
// with the sendmmsg system call replaced by one that accepts everything:
// the kernel's share is counted by the echo benchmarks.
// The deadline variants give every WR a send deadline (a server's
// answers: verbs.SendWR.Deadline), which costs a clock read per doorbell.
func BenchmarkTxUD(b *testing.B) {
	b.Run("chain=64", func(b *testing.B) { benchTxUD(b, 64, false) })
	b.Run("chain=1", func(b *testing.B) { benchTxUD(b, 1, false) })
	b.Run("chain=64,deadline", func(b *testing.B) { benchTxUD(b, 64, true) })
	b.Run("chain=1,deadline", func(b *testing.B) { benchTxUD(b, 1, true) })
}

func benchTxUD(b *testing.B, chain int, deadline bool) {
	cli := newUDEnd(b, nil, 64)
	srv := newUDEnd(b, nil, 1)
	h, err := cli.pd.CreateAH(verbs.AHAttr{Dest: srv.qp.Address()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	old := sendmmsg
	sendmmsg = func(_ uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) { return len(hdrs), 0 }
	b.Cleanup(func() { sendmmsg = old })
	wrs := make([]verbs.SendWR, chain)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: h, RemoteQPN: srv.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
		if deadline {
			wrs[i].Deadline = verbs.Now().Add(time.Hour)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(wrs) {
		for j := range wrs {
			wrs[j].Imm = uint32(i + j)
		}
		if n, err := cli.qp.PostSend(wrs); n != len(wrs) {
			b.Fatal(n, err)
		}
	}
}
