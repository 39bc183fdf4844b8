package e2e

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
)

// forgedMark: every forged answer carries a value at or above it, far
// above any value seqd hands out, so an accepted forgery is recognised.
const forgedMark = 1 << 62

// forgedAnswers builds full Spec-S0 answers (value forgedMark+tag) for
// every tag and each of the victim's likely QPNs, from src (with source
// QPN srcQPN(i)) to dst, with Q_Key qkey and a correct ICRC.
func forgedAnswers(src, dst netip.AddrPort, qpns []uint32, srcQPN func(i int) uint32, qkey uint32) [][]byte {
	var out [][]byte
	f := rocev2.Flow{Src: src.Addr().As4(), Dst: dst.Addr().As4(), SrcPort: src.Port(), DstPort: dst.Port(), FlagsFrag: 0x4000}
	i := 0
	for _, q := range qpns {
		for tag := range spec.Tag(spec.NumTags) {
			payload := make([]byte, spec.FullLen)
			spec.PutFull(payload, forgedMark+uint64(tag))
			p := rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: rocev2.DefaultPKey, DestQP: q, QKey: qkey,
				SrcQP: srcQPN(i), Imm: uint32(spec.AnswerImm(tag, forgedMark+uint64(tag))), Payload: payload}
			b := make([]byte, p.Len())
			if _, err := p.Encode(b); err != nil {
				panic(err) // a bug in this test
			}
			rocev2.PutICRC(&f, b)
			out = append(out, b)
			i++
		}
	}
	return out
}

// rawSender sends UDP datagrams with a spoofed source address and port
// (a raw IPv4 socket: needs root). The IPv4 ID is 0 with DF set, as the
// ICRC assumes and as Linux leaves it for an unconnected raw socket.
type rawSender struct{ fd int }

func newRawSender() (*rawSender, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return nil, err
	}
	return &rawSender{fd: fd}, nil
}

func (r *rawSender) send(src, dst netip.AddrPort, payload []byte, buf []byte) error {
	n := 20 + 8 + len(payload)
	b := buf[:n]
	b[0], b[1] = 0x45, 0
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	binary.BigEndian.PutUint16(b[4:], 0)      // ID
	binary.BigEndian.PutUint16(b[6:], 0x4000) // DF
	b[8], b[9] = 64, syscall.IPPROTO_UDP
	binary.BigEndian.PutUint16(b[10:], 0) // the kernel fills the checksum
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(b[26:], 0) // no UDP checksum (IPv4)
	copy(b[28:], payload)
	return syscall.Sendto(r.fd, b, 0, &syscall.SockaddrInet4{Addr: d})
}

func (r *rawSender) close() { syscall.Close(r.fd) }

// TestForgedAnswers: an admitted client sprays full answers (values at or
// above 2^62) over all 4,096 tags at another client's QPs while that
// client is under load (issue 12, defect 2). First from its own address
// with the Q_Key Connect gave it; then, where raw sockets are allowed,
// spoofing the server's own data address and QPNs, so that the Q_Key is
// the only secret left. The victim accepts none of them, every value
// it returns is verified, and it counts the forgeries it dropped.
func TestForgedAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := startMode(t, "", spec.ModeSpecS0)
	adm := admintest.Client(ctx, t, addr)
	vaddr := netip.MustParseAddrPort(freePort(t, "udp"))
	victim, err := client.Dial(ctx, addr, client.WithDevice("soft", vaddr.String(), ""), client.WithQPs(2),
		client.WithWindow(16), client.WithName("victim"), client.WithLogger(quietLogger()), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Close() })
	forger := newHostile(ctx, t, adm) // admitted: it knows what Connect tells any client
	// A fresh soft device numbers its QPs from 0x100: the victim's are
	// among the first eight, and so are the server's.
	var qpns []uint32
	for q := uint32(0x100); q < 0x108; q++ {
		qpns = append(qpns, q)
	}
	own := forgedAnswers(forger.src, vaddr, qpns, func(int) uint32 { return forger.srcQPN }, forger.qkey)
	spoofed := forgedAnswers(forger.dst, vaddr, qpns, func(i int) uint32 { return 0x100 + uint32(i%32) }, forger.qkey)
	raw, rawErr := newRawSender()
	if rawErr != nil {
		t.Logf("no raw socket (%v): the spoofed-source phase is skipped", rawErr)
	} else {
		defer raw.close()
	}

	var v verify.History
	var accepted atomic.Uint64
	origin := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loadErr atomic.Pointer[error]
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Since(origin)
				ts, err := victim.GetTimestamp(ctx)
				if err != nil {
					loadErr.CompareAndSwap(nil, &err)
					return
				}
				if uint64(ts) >= forgedMark {
					accepted.Add(1)
				}
				v.Record(g, verify.Call{Start: start, End: time.Since(origin), Value: uint64(ts)})
			}
		}()
	}
	before := victim.Stats()
	conn := forger.conn
	var sentOwn, sentSpoofed int
	buf := make([]byte, 2048)
	for round := range 4 {
		for _, p := range own {
			if _, err := conn.WriteToUDPAddrPort(p, vaddr); err == nil {
				sentOwn++
			}
			if sentOwn%256 == 0 {
				time.Sleep(time.Millisecond) // let the victim's socket drain: forgeries lost to overflow test nothing
			}
		}
		if raw != nil {
			for i, p := range spoofed {
				if err := raw.send(forger.dst, vaddr, p, buf); err != nil {
					t.Fatalf("raw send: %v", err)
				}
				sentSpoofed++
				if i%256 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}
		t.Logf("round %d sent", round)
	}
	// The victim keeps being served after the spray.
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if p := loadErr.Load(); p != nil {
		t.Fatalf("victim call failed: %v", *p)
	}
	after := victim.Stats()
	forged, badQKey := victimDrops(before, after)
	t.Logf("sent %d forged answers from the forger's address and %d spoofing the server's; victim: %d calls, %d forged values accepted, %d dropped for a wrong Q_Key, %d dropped by the source check, %d regressions",
		sentOwn, sentSpoofed, v.Len(), accepted.Load(), badQKey, forged, after.Regressions-before.Regressions)
	if n := accepted.Load(); n != 0 {
		t.Errorf("the victim accepted %d forged values", n)
	}
	if err := v.Check().Err(); err != nil {
		t.Error(err)
	}
	if v.Len() == 0 {
		t.Error("the victim made no call")
	}
	if badQKey+forged == 0 {
		t.Errorf("the victim counted none of %d forged answers", sentOwn+sentSpoofed)
	}
}
