// Helpers for the cgo files of package ibv (build tag ibverbs). They exist
// for three reasons: some libibverbs entry points are macros cgo cannot
// call; ibv_send_wr and ibv_wc hide fields in anonymous unions that Go
// cannot name; and a whole chain or batch must cross the cgo boundary in
// one call.
//
// Everything here is static inline so that every cgo file may include it.

#include <infiniband/verbs.h>
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// seqd_swr is a send work request in a flat form that Go fills in place.
// The opcode and send_flags are already libibverbs values; imm is in host
// byte order; sge_off indexes the QP's ibv_sge array.
struct seqd_swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	struct ibv_ah *ah;
	uint32_t rkey;
	uint32_t imm;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t sge_off;
	uint32_t num_sge;
	uint32_t opcode;
	uint32_t send_flags;
};

// seqd_qp holds a QP's preallocated work request arrays, sized to its
// capacities, so that posting allocates nothing.
struct seqd_qp {
	struct ibv_qp *qp;
	int send_wr, send_sge, recv_wr, recv_sge;
	struct seqd_swr *swr;       // send_wr
	struct ibv_send_wr *swrs;   // send_wr
	struct ibv_sge *ssge;       // send_wr * send_sge
	struct ibv_recv_wr *rwrs;   // recv_wr
	struct ibv_sge *rsge;       // recv_wr * recv_sge
	int bad;                    // index of the refused WR after a failed post
};

static inline void seqd_qp_free(struct seqd_qp *q) {
	if (q == NULL)
		return;
	free(q->swr);
	free(q->swrs);
	free(q->ssge);
	free(q->rwrs);
	free(q->rsge);
	free(q);
}

static inline struct seqd_qp *seqd_qp_alloc(struct ibv_qp *qp, int send_wr, int send_sge,
					    int recv_wr, int recv_sge) {
	struct seqd_qp *q = calloc(1, sizeof(*q));
	if (q == NULL)
		return NULL;
	if (send_wr < 1) send_wr = 1;
	if (send_sge < 1) send_sge = 1;
	if (recv_wr < 1) recv_wr = 1;
	if (recv_sge < 1) recv_sge = 1;
	q->qp = qp;
	q->send_wr = send_wr;
	q->send_sge = send_sge;
	q->recv_wr = recv_wr;
	q->recv_sge = recv_sge;
	q->swr = calloc(send_wr, sizeof(*q->swr));
	q->swrs = calloc(send_wr, sizeof(*q->swrs));
	q->ssge = calloc((size_t)send_wr * send_sge, sizeof(*q->ssge));
	q->rwrs = calloc(recv_wr, sizeof(*q->rwrs));
	q->rsge = calloc((size_t)recv_wr * recv_sge, sizeof(*q->rsge));
	if (!q->swr || !q->swrs || !q->ssge || !q->rwrs || !q->rsge) {
		seqd_qp_free(q);
		return NULL;
	}
	return q;
}

// seqd_post_send turns the first n flat requests into one ibv_send_wr
// chain and posts it: one doorbell. On failure it returns the errno and
// stores the index of the refused request in q->bad.
static inline int seqd_post_send(struct seqd_qp *q, int n) {
	struct ibv_send_wr *bad = NULL;
	int i, rc;

	for (i = 0; i < n; i++) {
		struct seqd_swr *s = &q->swr[i];
		struct ibv_send_wr *w = &q->swrs[i];

		memset(w, 0, sizeof(*w));
		w->wr_id = s->wr_id;
		w->next = (i + 1 < n) ? &q->swrs[i + 1] : NULL;
		w->sg_list = s->num_sge ? &q->ssge[s->sge_off] : NULL;
		w->num_sge = (int)s->num_sge;
		w->opcode = (enum ibv_wr_opcode)s->opcode;
		w->send_flags = s->send_flags;
		switch (w->opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htobe32(s->imm);
			break;
		default:
			break;
		}
		if (s->ah != NULL) {
			w->wr.ud.ah = s->ah;
			w->wr.ud.remote_qpn = s->remote_qpn;
			w->wr.ud.remote_qkey = s->remote_qkey;
		} else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = s->remote_addr;
			w->wr.atomic.compare_add = s->compare_add;
			w->wr.atomic.swap = s->swap;
			w->wr.atomic.rkey = s->rkey;
		} else {
			w->wr.rdma.remote_addr = s->remote_addr;
			w->wr.rdma.rkey = s->rkey;
		}
	}
	q->bad = 0;
	rc = ibv_post_send(q->qp, &q->swrs[0], &bad);
	if (rc != 0)
		q->bad = bad ? (int)(bad - &q->swrs[0]) : 0;
	return rc;
}

// seqd_post_recv links the first n receive requests, which Go filled in
// place (wr_id, sg_list, num_sge), and posts them in one call.
static inline int seqd_post_recv(struct seqd_qp *q, int n) {
	struct ibv_recv_wr *bad = NULL;
	int i, rc;

	for (i = 0; i < n; i++)
		q->rwrs[i].next = (i + 1 < n) ? &q->rwrs[i + 1] : NULL;
	q->bad = 0;
	rc = ibv_post_recv(q->qp, &q->rwrs[0], &bad);
	if (rc != 0)
		q->bad = bad ? (int)(bad - &q->rwrs[0]) : 0;
	return rc;
}

// seqd_post_both posts nr receives to rq (when rq is not NULL), then ns
// sends to sq (when sq is not NULL): one crossing from Go for both
// chains. On failure it returns the errno and sets *which to 0 (the
// receives) or 1 (the sends); the refused index is in that QP's bad.
static inline int seqd_post_both(struct seqd_qp *rq, int nr, struct seqd_qp *sq, int ns, int *which) {
	int rc;

	*which = 0;
	if (rq != NULL && nr > 0) {
		rc = seqd_post_recv(rq, nr);
		if (rc != 0)
			return rc;
	}
	*which = 1;
	if (sq != NULL && ns > 0)
		return seqd_post_send(sq, ns);
	return 0;
}

// seqd_wc is a work completion with the union resolved and the immediate
// data already in host byte order.
struct seqd_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
};

// seqd_cq is a CQ with its completion channel and preallocated poll batch.
struct seqd_cq {
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	int n;
	struct ibv_wc *wc;     // n
	struct seqd_wc *out;   // n
};

static inline void seqd_cq_free(struct seqd_cq *c) {
	if (c == NULL)
		return;
	free(c->wc);
	free(c->out);
	free(c);
}

static inline struct seqd_cq *seqd_cq_alloc(int n) {
	struct seqd_cq *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	if (n < 1) n = 1;
	c->n = n;
	c->wc = calloc(n, sizeof(*c->wc));
	c->out = calloc(n, sizeof(*c->out));
	if (!c->wc || !c->out) {
		seqd_cq_free(c);
		return NULL;
	}
	return c;
}

// seqd_poll polls up to n completions in one call and converts them.
static inline int seqd_poll(struct seqd_cq *c, int n) {
	int i, got;

	if (n > c->n)
		n = c->n;
	got = ibv_poll_cq(c->cq, n, c->wc);
	for (i = 0; i < got; i++) {
		struct ibv_wc *w = &c->wc[i];
		struct seqd_wc *o = &c->out[i];

		o->wr_id = w->wr_id;
		o->status = w->status;
		o->opcode = w->opcode;
		o->vendor_err = w->vendor_err;
		o->byte_len = w->byte_len;
		o->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? be32toh(w->imm_data) : 0;
		o->qp_num = w->qp_num;
		o->src_qp = w->src_qp;
		o->wc_flags = w->wc_flags;
		o->pkey_index = w->pkey_index;
		o->slid = w->slid;
	}
	return got;
}

// seqd_cq_event consumes one completion event from the (nonblocking)
// channel, acknowledges it and re-arms the CQ. It returns 0, or the errno
// (EAGAIN when no event is pending).
static inline int seqd_cq_event(struct seqd_cq *c) {
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(c->ch, &cq, &ctx) != 0)
		return errno ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	return ibv_req_notify_cq(cq, 0);
}

static inline int seqd_req_notify(struct ibv_cq *cq) {
	return ibv_req_notify_cq(cq, 0);
}

// Wrappers for entry points that are macros in verbs.h.

static inline int seqd_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

static inline struct ibv_mr *seqd_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static inline ssize_t seqd_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t n) {
	return ibv_query_gid_table(ctx, e, n, 0);
}

static inline const char *seqd_device_name(struct ibv_device **list, int i) {
	return ibv_get_device_name(list[i]);
}

// seqd_async_event reads one asynchronous event from the context's
// (nonblocking) async fd, acknowledges it, and returns what it names: the
// CQ (as an address, for CQ_ERR), the QP number (QP events) or the port
// (port events). It returns 0, or the errno (EAGAIN: none pending).
static inline int seqd_async_event(struct ibv_context *ctx, int *type, uintptr_t *cq, uint32_t *qpn, int *port) {
	struct ibv_async_event ev;

	if (ibv_get_async_event(ctx, &ev) != 0)
		return errno ? errno : EIO;
	*type = ev.event_type;
	*cq = 0;
	*qpn = 0;
	*port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		*cq = (uintptr_t)ev.element.cq;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

// seqd_post_many posts nr[i] receives to rqs[i] for each of the nq QPs,
// then ns sends to sq (when not NULL): one crossing from Go for all the
// chains. On failure it returns the errno and sets *failed to the index
// of the receive QP that refused (nq: the sends); the refused WR's index
// is in that QP's bad.
static inline int seqd_post_many(struct seqd_qp **rqs, const int *nr, int nq, struct seqd_qp *sq, int ns, int *failed) {
	int i, rc;

	for (i = 0; i < nq; i++) {
		if (nr[i] > 0) {
			rc = seqd_post_recv(rqs[i], nr[i]);
			if (rc != 0) {
				*failed = i;
				return rc;
			}
		}
	}
	*failed = nq;
	if (sq != NULL && ns > 0)
		return seqd_post_send(sq, ns);
	return 0;
}
