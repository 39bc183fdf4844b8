//go:build ibverbs && cgo && ibverbs_fake

// A fake ibv_context whose post and poll operations are test functions, so
// that the Go↔C work request and completion paths run without a NIC:
//
//	go test -tags ibverbs,ibverbs_fake ./verbs/ibv/
//
// It is test support only and is not built into the provider.

package ibv

/*
#include "shim.h"

#define FAKE_MAX 64

struct fake_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge[4];
};

static struct {
	struct ibv_context ctx;
	struct ibv_qp qp;
	struct ibv_cq cq;
	int fail_at, fail_errno;
	int nsend, nrecv, nwc, wc_head;
	int send_calls, recv_calls;
	struct fake_wr send[FAKE_MAX];
	struct ibv_recv_wr recv[FAKE_MAX];
	struct ibv_sge recv_sge[FAKE_MAX][4];
	struct ibv_wc wc[FAKE_MAX];
	int wc_sq[FAKE_MAX];  // for a send completion: its send queue position + 1, else 0

	// The send queue as hardware accounts it: a slot is taken at post and
	// freed only when a polled completion covers it (a signaled one frees
	// every WR posted before it too). max_send_wr 0: unlimited.
	int max_send_wr;
	struct { uint64_t id; int opcode; int signaled; int done; } sq[FAKE_MAX];
	int sq_head, sq_tail; // positions, never wrapped back (tests are short)
	int rq_done;          // posted receives consumed so far (flush starts there)
	int in_err;           // the QP is in ERR: everything flushes
	int cq_cap;           // completions the CQ holds; more: overrun
	int overrun, async_cq_err;
} fake;

static void fake_wc_push(struct ibv_wc *w, int sq_pos) {
	if (fake.nwc - fake.wc_head >= fake.cq_cap || fake.nwc == FAKE_MAX) {
		// CQ overrun: the CQ is unusable and an async CQ_ERR is raised.
		fake.overrun = 1;
		fake.async_cq_err = 1;
		return;
	}
	fake.wc_sq[fake.nwc] = sq_pos;
	fake.wc[fake.nwc++] = *w;
}

static void fake_flush_wc(uint64_t id, int opcode, int sq_pos) {
	struct ibv_wc w;
	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.status = IBV_WC_WR_FLUSH_ERR;
	w.opcode = opcode;
	w.qp_num = fake.qp.qp_num;
	w.vendor_err = 0x42;
	fake_wc_push(&w, sq_pos);
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	int i, j;
	fake.send_calls++;
	for (i = 0; wr != NULL; wr = wr->next, i++) {
		if (i == fake.fail_at || fake.nsend == FAKE_MAX) {
			*bad = wr;
			return fake.fail_errno;
		}
		if (fake.max_send_wr > 0 && fake.sq_tail - fake.sq_head >= fake.max_send_wr) {
			*bad = wr; // the send queue is full: mlx5 says ENOMEM
			return ENOMEM;
		}
		if (fake.sq_tail < FAKE_MAX) {
			int p = fake.sq_tail++;
			fake.sq[p].id = wr->wr_id;
			fake.sq[p].opcode = wr->opcode;
			fake.sq[p].signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
			fake.sq[p].done = 0;
			if (fake.in_err) {
				fake.sq[p].done = 1;
				fake_flush_wc(wr->wr_id, IBV_WC_SEND, p + 1);
			}
		}
		struct fake_wr *f = &fake.send[fake.nsend++];
		f->wr = *wr;
		for (j = 0; j < wr->num_sge && j < 4; j++)
			f->sge[j] = wr->sg_list[j];
	}
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	int i;
	fake.recv_calls++;
	for (i = 0; wr != NULL; wr = wr->next, i++) {
		if (i == fake.fail_at || fake.nrecv == FAKE_MAX) {
			*bad = wr;
			return fake.fail_errno;
		}
		if (fake.in_err)
			fake_flush_wc(wr->wr_id, IBV_WC_RECV, 0);
		fake.recv[fake.nrecv] = *wr;
		for (int j = 0; j < wr->num_sge && j < 4; j++)
			fake.recv_sge[fake.nrecv][j] = wr->sg_list[j];
		fake.nrecv++;
	}
	return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	int got = 0;
	if (fake.overrun)
		return -1;
	while (got < n && fake.wc_head < fake.nwc) {
		int p = fake.wc_sq[fake.wc_head];
		if (p > 0 && fake.sq_head < p)
			fake.sq_head = p; // this completion frees its slot and all before it
		wc[got++] = fake.wc[fake.wc_head++];
	}
	return got;
}

// fake_execute_sends is the NIC sending the oldest k posted WRs: the
// signaled ones complete (their slots free when polled); unsignaled ones
// keep their slots until a later completion is polled.
static int fake_execute_sends(int k) {
	int done = 0;
	for (int p = fake.sq_head; p < fake.sq_tail && done < k; p++) {
		if (fake.sq[p].done)
			continue;
		fake.sq[p].done = 1;
		done++;
		if (fake.sq[p].signaled) {
			struct ibv_wc w;
			memset(&w, 0, sizeof(w));
			w.wr_id = fake.sq[p].id;
			w.status = IBV_WC_SUCCESS;
			w.opcode = IBV_WC_SEND;
			w.qp_num = fake.qp.qp_num;
			fake_wc_push(&w, p + 1);
		}
	}
	return done;
}

// fake_set_err moves the QP to ERR as hardware does on a fatal error:
// every WR not yet executed, signaled or not, and every posted receive
// not yet consumed completes with IBV_WC_WR_FLUSH_ERR.
static void fake_set_err(void) {
	fake.in_err = 1;
	for (int p = fake.sq_head; p < fake.sq_tail; p++) {
		if (!fake.sq[p].done) {
			fake.sq[p].done = 1;
			fake_flush_wc(fake.sq[p].id, IBV_WC_SEND, p + 1);
		}
	}
	for (int i = fake.rq_done; i < fake.nrecv; i++)
		fake_flush_wc(fake.recv[i].wr_id, IBV_WC_RECV, 0);
	fake.rq_done = fake.nrecv;
}

static void fake_strict(int max_send_wr, int cq_cap) { fake.max_send_wr = max_send_wr; fake.cq_cap = cq_cap; }
static int fake_take_cq_err(void) { int v = fake.async_cq_err; fake.async_cq_err = 0; return v; }

static void fake_reset(uint32_t qpn) {
	memset(&fake, 0, sizeof(fake));
	fake.ctx.ops.post_send = fake_post_send;
	fake.ctx.ops.post_recv = fake_post_recv;
	fake.ctx.ops.poll_cq = fake_poll_cq;
	fake.qp.context = &fake.ctx;
	fake.qp.qp_num = qpn;
	fake.cq.context = &fake.ctx;
	fake.fail_at = -1;
	fake.cq_cap = FAKE_MAX;
}

static struct ibv_qp *fake_qp(void) { return &fake.qp; }
static struct ibv_cq *fake_cq(void) { return &fake.cq; }
static void fake_fail(int at, int err) { fake.fail_at = at; fake.fail_errno = err; }
static int fake_nsend(void) { return fake.nsend; }
static int fake_nrecv(void) { return fake.nrecv; }
static int fake_calls(void) { return fake.send_calls + fake.recv_calls; }
static void fake_clear_log(void) { fake.nsend = fake.nrecv = fake.send_calls = fake.recv_calls = 0; }
static struct fake_wr *fake_sent(int i) { return &fake.send[i]; }
static uint32_t fake_imm_raw(int i) { return fake.send[i].wr.imm_data; }
static struct ibv_ah *fake_ud_ah(int i) { return fake.send[i].wr.wr.ud.ah; }
static uint32_t fake_ud_qpn(int i) { return fake.send[i].wr.wr.ud.remote_qpn; }
static uint32_t fake_ud_qkey(int i) { return fake.send[i].wr.wr.ud.remote_qkey; }
static uint64_t fake_rdma_addr(int i) { return fake.send[i].wr.wr.rdma.remote_addr; }
static uint32_t fake_rdma_rkey(int i) { return fake.send[i].wr.wr.rdma.rkey; }
static uint64_t fake_atomic_addr(int i) { return fake.send[i].wr.wr.atomic.remote_addr; }
static uint64_t fake_atomic_cmp(int i) { return fake.send[i].wr.wr.atomic.compare_add; }
static uint64_t fake_atomic_swap(int i) { return fake.send[i].wr.wr.atomic.swap; }
static uint32_t fake_atomic_rkey(int i) { return fake.send[i].wr.wr.atomic.rkey; }
static uint64_t fake_recv_id(int i) { return fake.recv[i].wr_id; }
static int fake_recv_nsge(int i) { return fake.recv[i].num_sge; }
static struct ibv_sge fake_recv_sge(int i) { return fake.recv_sge[i][0]; }

// fake_deliver_grh writes the 40-byte GRH of a UD receive into posted
// receive i as a NIC does: into the first 40 bytes of its scatter list,
// split across SGEs where the first are shorter. It returns the bytes
// written.
static int fake_deliver_grh(int i, const uint8_t *grh) {
	int off = 0;
	for (int j = 0; j < fake.recv[i].num_sge && j < 4 && off < 40; j++) {
		struct ibv_sge *s = &fake.recv_sge[i][j];
		int n = s->length < (uint32_t)(40 - off) ? (int)s->length : 40 - off;
		memcpy((void *)(uintptr_t)s->addr, grh + off, n);
		off += n;
	}
	return off;
}

static void fake_push_wc(uint64_t id, int status, int opcode, uint32_t len, uint32_t imm_host,
			 uint32_t qpn, uint32_t src_qp, unsigned flags, uint16_t slid) {
	struct ibv_wc ws, *w = &ws;
	memset(w, 0, sizeof(*w));
	w->wr_id = id;
	w->status = status;
	w->opcode = opcode;
	w->byte_len = len;
	w->imm_data = htobe32(imm_host);
	w->qp_num = qpn;
	w->src_qp = src_qp;
	w->wc_flags = flags;
	w->slid = slid;
	w->vendor_err = status ? 0x42 : 0;
	fake_wc_push(w, 0);
}
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/seqd/seqd/verbs"
)

// libibverbs values, for tests that cannot import "C".
var (
	fakeWRSend        = uint32(C.IBV_WR_SEND)
	fakeWRSendImm     = uint32(C.IBV_WR_SEND_WITH_IMM)
	fakeWRWrite       = uint32(C.IBV_WR_RDMA_WRITE)
	fakeWRFetchAdd    = uint32(C.IBV_WR_ATOMIC_FETCH_AND_ADD)
	fakeSendSignaled  = uint32(C.IBV_SEND_SIGNALED)
	fakeSendInline    = uint32(C.IBV_SEND_INLINE)
	fakeWCRecv        = int(C.IBV_WC_RECV)
	fakeWCSend        = int(C.IBV_WC_SEND)
	fakeWCFlushErr    = int(C.IBV_WC_WR_FLUSH_ERR)
	fakeWCSuccess     = int(C.IBV_WC_SUCCESS)
	fakeWCGRH         = uint32(C.IBV_WC_GRH)
	fakeWCWithImm     = uint32(C.IBV_WC_WITH_IMM)
	fakeErrnoNoMem    = int(C.ENOMEM)
	fakeErrnoInvalArg = int(C.EINVAL)
)

// fakeEnv is a QP over the fake context with its PD, CQ and one MR.
type fakeEnv struct {
	dev *device
	pd  *pd
	cq  *cq
	qp  *qp
	mr  *mr
}

// newFakeEnv builds a QP of type typ in state RTS on the fake context. Its
// C memory is not freed; tests make few.
func newFakeEnv(typ verbs.QPType, caps verbs.QPCap) *fakeEnv {
	const qpn = 0x123
	C.fake_reset(qpn)
	d := &device{name: "fake0", port: 1, gidIndex: 3}
	p := &pd{dev: d, mrs: map[uint32]*mr{}}
	sc := C.seqd_cq_alloc(16)
	sc.cq = C.fake_cq()
	c := &cq{dev: d, c: sc, out: unsafe.Slice(sc.out, int(sc.n)), qps: map[uint32]*qp{}}
	q := newQP(p, c, c, C.fake_qp(), typ, caps)
	q.state.Store(uint32(verbs.StateRTS))
	buf := make([]byte, 8192)
	m := &mr{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), lkey: 0x77, rkey: 0x88}
	p.mrs[m.lkey] = m
	return &fakeEnv{dev: d, pd: p, cq: c, qp: q, mr: m}
}

// fakeAH is an AH of the env's PD with a recognisable C pointer.
func (e *fakeEnv) fakeAH() *ah {
	return &ah{pd: e.pd, ah: (*C.struct_ibv_ah)(unsafe.Pointer(C.fake_qp()))}
}

// ahPointer is the C pointer of a, for comparing with what the driver got.
func (a *ah) ahPointer() unsafe.Pointer { return unsafe.Pointer(a.ah) }

func fakeFail(at int, errno int) { C.fake_fail(C.int(at), C.int(errno)) }
func fakeCalls() int             { return int(C.fake_calls()) }
func fakeClearLog()              { C.fake_clear_log() }

// fakeSentWR is what the fake driver received in one send work request.
type fakeSentWR struct {
	ID                  uint64
	Opcode, Flags       uint32
	ImmWire             [4]byte // imm_data as laid out in memory
	AH                  unsafe.Pointer
	RemoteQPN, QKey     uint32
	RemoteAddr          uint64
	RKey                uint32
	AtomicAddr          uint64
	Compare, Swap       uint64
	AtomicRKey          uint32
	SG                  []verbs.SGE
	NextLinked, HasNext bool
}

func fakeSent() []fakeSentWR {
	out := make([]fakeSentWR, int(C.fake_nsend()))
	for i := range out {
		ci := C.int(i)
		f := C.fake_sent(ci)
		w := fakeSentWR{
			ID:         uint64(f.wr.wr_id),
			Opcode:     uint32(f.wr.opcode),
			Flags:      uint32(f.wr.send_flags),
			AH:         unsafe.Pointer(C.fake_ud_ah(ci)),
			RemoteQPN:  uint32(C.fake_ud_qpn(ci)),
			QKey:       uint32(C.fake_ud_qkey(ci)),
			RemoteAddr: uint64(C.fake_rdma_addr(ci)),
			RKey:       uint32(C.fake_rdma_rkey(ci)),
			AtomicAddr: uint64(C.fake_atomic_addr(ci)),
			Compare:    uint64(C.fake_atomic_cmp(ci)),
			Swap:       uint64(C.fake_atomic_swap(ci)),
			AtomicRKey: uint32(C.fake_atomic_rkey(ci)),
			HasNext:    f.wr.next != nil,
		}
		binary.NativeEndian.PutUint32(w.ImmWire[:], uint32(C.fake_imm_raw(ci)))
		for j := 0; j < int(f.wr.num_sge) && j < 4; j++ {
			s := f.sge[j]
			w.SG = append(w.SG, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
		}
		out[i] = w
	}
	return out
}

// fakeRecvd returns the IDs and first SGEs of the posted receives.
func fakeRecvd() (ids []uint64, sges []verbs.SGE) {
	for i := range int(C.fake_nrecv()) {
		ids = append(ids, uint64(C.fake_recv_id(C.int(i))))
		if C.fake_recv_nsge(C.int(i)) > 0 {
			s := C.fake_recv_sge(C.int(i))
			sges = append(sges, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
		}
	}
	return ids, sges
}

// fakeStrict makes the fake account the send queue as hardware does
// (maxSendWR slots, freed by polled completions) and hold cqCap
// completions before it overruns.
func fakeStrict(maxSendWR, cqCap int) { C.fake_strict(C.int(maxSendWR), C.int(cqCap)) }

// fakeExecuteSends makes the fake NIC send the oldest k posted WRs.
func fakeExecuteSends(k int) int { return int(C.fake_execute_sends(C.int(k))) }

// fakeSetErr moves the fake QP to ERR, flushing everything outstanding.
func fakeSetErr() { C.fake_set_err() }

// fakeTakeCQErr reports (once) whether the fake CQ overran and raised
// IBV_EVENT_CQ_ERR.
func fakeTakeCQErr() bool { return C.fake_take_cq_err() != 0 }

// fakeDeliverGRH writes grh into posted receive i's scatter list, split
// across its SGEs as a NIC does, and returns the bytes written.
func fakeDeliverGRH(i int, grh []byte) int {
	return int(C.fake_deliver_grh(C.int(i), (*C.uint8_t)(unsafe.Pointer(&grh[0]))))
}

// fakeCompletion queues a completion for the next Poll.
type fakeCompletion struct {
	ID         uint64
	Status     int
	Opcode     int
	Len        uint32
	Imm        uint32
	QPN, SrcQP uint32
	Flags      uint32
	SLID       uint16
}

func fakePushWC(w fakeCompletion) {
	C.fake_push_wc(C.uint64_t(w.ID), C.int(w.Status), C.int(w.Opcode), C.uint32_t(w.Len), C.uint32_t(w.Imm),
		C.uint32_t(w.QPN), C.uint32_t(w.SrcQP), C.uint(w.Flags), C.uint16_t(w.SLID))
}

// fakeCQAddr is the C address of the env's CQ, as a CQ_ERR event names it.
func (e *fakeEnv) fakeCQAddr() uintptr {
	e.dev.addCQ(e.cq)
	return uintptr(unsafe.Pointer(e.cq.c.cq))
}

// extraQP is another QP of the env over the fake driver's one ibv_qp:
// its own work request arrays, the same log.
func (e *fakeEnv) extraQP(typ verbs.QPType, caps verbs.QPCap) *qp {
	q := newQP(e.pd, e.cq, e.cq, C.fake_qp(), typ, caps)
	q.state.Store(uint32(verbs.StateRTS))
	return q
}
