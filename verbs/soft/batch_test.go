package soft

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// TestBuildGSO table-tests how a doorbell's packets become sendmmsg
// messages: runs of equal-size, contiguous packets to one peer share a
// UDP GSO message (the last may be shorter), up to gsoMaxSegs segments.
func TestBuildGSO(t *testing.T) {
	p1, p2 := &peer{}, &peer{}
	type msg struct {
		bytes, seg int // seg 0: no UDP_SEGMENT control message
	}
	tests := []struct {
		name  string
		gso   bool
		peers []*peer
		sizes []int
		want  []msg
	}{
		{"one", true, []*peer{p1}, []int{28}, []msg{{28, 0}}},
		{"run", true, rep(p1, 3), []int{28, 28, 28}, []msg{{84, 28}}},
		{"short last", true, rep(p1, 3), []int{28, 28, 20}, []msg{{76, 28}}},
		{"short first", true, rep(p1, 2), []int{20, 28}, []msg{{20, 0}, {28, 0}}},
		{"short middle ends run", true, rep(p1, 3), []int{28, 20, 28}, []msg{{48, 28}, {28, 0}}},
		{"two peers", true, []*peer{p1, p1, p2, p2}, []int{28, 28, 28, 28}, []msg{{56, 28}, {56, 28}}},
		{"max segments", true, rep(p1, gsoMaxSegs+1), repInt(28, gsoMaxSegs+1), []msg{{28 * gsoMaxSegs, 28}, {28, 0}}},
		{"gso off", false, rep(p1, 2), []int{28, 28}, []msg{{28, 0}, {28, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &queue{gso: tt.gso, arena: make([]byte, 1<<16), hdrs: make([]unix.Mmsghdr, 128),
				iovs: make([]unix.Iovec, 128), ctrl: make([]byte, 128*cmsgSpace), hdrPkt: make([]int, 128)}
			for i, n := range tt.sizes {
				q.pkts = append(q.pkts, txPkt{pe: tt.peers[i], off: int32(q.used), n: int32(n)})
				q.used += n
			}
			q.build(0)
			if q.nhdr != len(tt.want) {
				t.Fatalf("%d messages, want %d", q.nhdr, len(tt.want))
			}
			for i, w := range tt.want {
				h := &q.hdrs[i].Hdr
				if got := int(q.iovs[i].Len); got != w.bytes {
					t.Errorf("message %d: %d bytes, want %d", i, got, w.bytes)
				}
				seg := 0
				if h.Controllen > 0 {
					cm := (*unix.Cmsghdr)(unsafe.Pointer(h.Control))
					if cm.Level != unix.SOL_UDP || cm.Type != unix.UDP_SEGMENT {
						t.Fatalf("message %d: control message %d/%d", i, cm.Level, cm.Type)
					}
					seg = int(*(*uint16)(unsafe.Pointer(&q.ctrl[i*cmsgSpace+unix.CmsgLen(0)])))
				}
				if seg != w.seg {
					t.Errorf("message %d: segment size %d, want %d", i, seg, w.seg)
				}
			}
		})
	}
}

func rep(p *peer, n int) []*peer {
	s := make([]*peer, n)
	for i := range s {
		s[i] = p
	}
	return s
}

func repInt(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestGSOFallback: when the kernel refuses a GSO message with EIO, the
// queue counts it, stops using GSO, and the same packets still arrive,
// one datagram each.
func TestGSOFallback(t *testing.T) {
	real := sendmmsg
	refused := 0
	sendmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if hdrs[0].Hdr.Controllen > 0 {
			refused++
			return 0, unix.EIO
		}
		return real(fd, hdrs)
	}
	// Restored after the devices below are closed (cleanups run last
	// first), so their progress goroutines never see the swap.
	t.Cleanup(func() { sendmmsg = real })

	a := newUDEnd(t, nil, 16)
	b := newUDEnd(t, nil, 16)
	rwr := make([]verbs.RecvWR, 16)
	sg := make([]verbs.SGE, 16)
	b.postRecvs(t, rwr, sg, 0, 16)
	ah, err := a.pd.CreateAH(verbs.AHAttr{Dest: b.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	for round := 0; round < 2; round++ {
		wrs := make([]verbs.SendWR, 4)
		for i := range wrs {
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, Imm: uint32(10*round + i), AH: ah,
				RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
		}
		if n, err := a.qp.PostSend(wrs); n != 4 || err != nil {
			t.Fatal(n, err)
		}
		wc := make([]verbs.WC, 16)
		got := 0
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for got < 4 {
			n, err := b.cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range wc[:n] {
				if want := uint32(10*round + got); c.Imm != want {
					t.Fatalf("round %d: immediate %d, want %d", round, c.Imm, want)
				}
				got++
			}
			b.postRecvs(t, rwr, sg, 0, n)
			if n == 0 {
				if err := b.cq.Wait(ctx); err != nil {
					t.Fatalf("round %d: %d of 4 arrived: %v", round, got, err)
				}
			}
		}
		cancel()
	}
	if refused != 1 {
		t.Errorf("GSO refused %d times, want once (then no more GSO)", refused)
	}
	var fallbacks uint64
	a.dev.(verbs.Counters).VisitCounters(func(n string, v uint64) {
		if n == "gso_fallback" {
			fallbacks = v
		}
	})
	if fallbacks != 1 {
		t.Errorf("gso_fallback = %d, want 1", fallbacks)
	}
}

// TestParseCmsgs reads GRO and IP_PKTINFO control messages in either
// order, and ignores truncated or unknown ones.
func TestParseCmsgs(t *testing.T) {
	gro := func(seg uint16) []byte {
		b := make([]byte, unix.CmsgSpace(4))
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_GRO
		cm.SetLen(unix.CmsgLen(4))
		*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = seg
		return b
	}
	pktinfo := func(a [4]byte) []byte {
		b := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		cm.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		(*unix.Inet4Pktinfo)(unsafe.Pointer(&b[unix.CmsgLen(0)])).Addr = a
		return b
	}
	ip := [4]byte{10, 1, 2, 3}
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	tests := []struct {
		name    string
		b       []byte
		gso     int
		haveDst bool
	}{
		{"none", nil, 0, false},
		{"gro", gro(28), 28, false},
		{"pktinfo", pktinfo(ip), 0, true},
		{"both", cat(gro(28), pktinfo(ip)), 28, true},
		{"both reversed", cat(pktinfo(ip), gro(40)), 40, true},
		{"truncated", gro(28)[:10], 0, false},
		{"bad length", func() []byte { b := gro(28); b[0] = 200; return b }(), 0, false},
	}
	for _, tt := range tests {
		gso, dst, have := parseCmsgs(tt.b)
		if gso != tt.gso || have != tt.haveDst || (have && dst != ip) {
			t.Errorf("%s: gso %d dst %v %v, want %d %v", tt.name, gso, dst, have, tt.gso, tt.haveDst)
		}
	}
}
