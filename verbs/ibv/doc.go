// Package ibv is the verbs provider for real RDMA NICs: a thin cgo layer
// over rdma-core's libibverbs, registered as provider "ibv".
//
// # Building
//
// The provider needs cgo and libibverbs-dev and is behind a build tag:
//
//	CGO_ENABLED=1 go build -tags ibverbs ./...
//
// Without the tag (or without cgo) the package still registers "ibv", but
// opening it fails with an error wrapping verbs.ErrNotSupported that says
// how to rebuild, so CGO_ENABLED=0 builds and tests work everywhere.
//
// # Opening
//
// verbs.Open("ibv", device, opts) takes an RDMA device name (mlx5_0), the
// name of a network interface backed by one (eth0, resolved through
// sysfs with github.com/Mellanox/rdmamap), or "" for the first device.
// Options:
//
//	port=N          physical port (default 1)
//	gid_index=N     source GID index (default: the port's first RoCE v2
//	                GID of gid_family, as ibv_query_gid_table reports;
//	                with none, opening fails: index 0 is usually RoCE v1)
//	gid_family=F    ipv4 (default) or ipv6
//	tclass=N        traffic class (IPv4 TOS byte) of AHs and paths that
//	                leave it 0
//	atomic_order=O  host or be: overrides the atomic byte order
//	                (DeviceAttr.AtomicBigEndian), which otherwise follows
//	                atomic_cap: a device that advertises atomics uses host
//	                order (mlx5 reports IB_ATOMIC_HCA only then)
//
// Unknown options are an error wrapping verbs.ErrInvalidArgument. With no
// device the error wraps verbs.ErrNoDevice and carries the errno of
// ibv_get_device_list (ENOSYS on kernels without InfiniBand support).
//
// # What it maps
//
// Device is an ibv_context bound to one port and one source GID;
// Address() is that GID (ibv_query_gid) and the port's LID, with Port 0
// (UDP 4791). Attr() comes from ibv_query_device and ibv_query_port when
// the device is opened. Two fields have no libibverbs counterpart:
// MaxInline is 0 (libibverbs reports inline capacity per QP, in the caps
// ibv_create_qp grants), and Queues is 0, meaning "not applicable": a NIC
// gives every QP its own hardware queue, so the caller picks how many QPs
// to spread work over.
//
// Port numbers and source GID indexes in QPAttr and AHAttr are relative
// to the opened device: PortNum 0 or 1 means the port chosen with
// "port=" (the verbs bring-up helpers always say 1), and SGIDIndex 0
// means the chosen gid_index. Every address handle is global (RoCE
// needs the GRH); HopLimit 0 means 64.
//
// MRs are anonymous mmap memory (outside the Go heap, so C and the NIC may
// keep pointers to it) registered with ibv_reg_mr; Addr() is the real
// virtual address.
//
// PostSend and PostRecv fill per-QP C arrays of work requests and SGEs,
// preallocated to the capacities the driver granted, and post the whole
// chain with one cgo call and one ibv_post_send or ibv_post_recv: no
// allocation and no Go pointer crosses into C. A chain longer than the
// queue is cut with verbs.ErrQueueFull; bad_wr maps back to the returned
// count. Opcodes, flags, access rights, MTUs, states and attribute masks
// are converted explicitly (see maps.go); Imm is converted to and from
// big endian in C.
//
// Poll moves a batch of up to 256 completions with one cgo call. For UD
// receives it fills WC.Src from the GRH area of the receive buffer: each
// UD QP remembers, in posting order, the SGEs that hold each receive's
// first 40 bytes (the NIC writes the GRH across them when the first is
// shorter; UD receives complete in order), and Poll gathers them through
// the registered MRs, never through a raw address. WC.Src.Port is 0: a
// NIC never shows the UDP header.
//
// QP.PostBatch (verbs.BatchPoster) posts a receive chain and a send chain
// in one cgo call: a loop that polls one CQ shared by its receives and
// sends and posts through verbs.PostBatch makes two cgo calls per batch.
// The provider_crossings counter counts them.
//
// A goroutine reads the context's asynchronous events (parked in the
// netpoller on the async fd): IBV_EVENT_CQ_ERR makes the CQ's Poll fail
// with verbs.ErrCQOverrun; QP_FATAL, QP_REQ_ERR and QP_ACCESS_ERR put
// the QP in ERR; port and device events set port_down and device_fatal.
// Each is logged and counted (async_* counters). RoCE v2 over
// IPv4 is recognised as rdma-core does, by a valid IPv4 header in bytes
// 20..39.
//
// Each CQ has its own completion channel, kept armed: Wait parks on the
// channel's nonblocking fd in Go's netpoller, then reads, acknowledges and
// re-arms in one cgo call. Resources count their children: closing a
// device, PD or CQ that still has some fails with verbs.ErrBusy instead of
// freeing C memory in use, and closing twice fails with verbs.ErrClosed.
//
// The device implements verbs.Counters from the port's sysfs counters and
// hw_counters (best effort), under their kernel names plus verbs' common
// names where one matches.
//
// # Testing
//
// The machines seqd is developed on have no RDMA device (their kernels
// lack InfiniBand support, so ibv_get_device_list fails with ENOSYS).
// What runs there: the stub, option parsing, GID choice, GRH parsing and
// counters (untagged tests); under -tags ibverbs the conversions and the
// no-device error; and under -tags ibverbs,ibverbs_fake the post and poll
// paths against a fake ibv_context whose post_send, post_recv and poll_cq
// are test functions (chain linking, bad_wr mapping, unions, byte order
// of Imm, GRH sources and a GRH split across SGEs, zero allocations,
// async events, batched posts; with fakeStrict the fake accounts the send
// queue as hardware does, flushes every outstanding WR on ERR and
// overruns a full CQ). CI runs it (make test-ibverbs-fake). What needs a NIC (device and
// resource creation, Modify, Wait, the conformance suite in
// verbs/verbstest) skips with the reason; on a host with a NIC run
//
//	SEQD_IBV_DEVICE=mlx5_0 go test -tags ibverbs ./verbs/ibv/
//
// SEQD_IBV_OPTIONS (k=v,k=v) passes provider options. The conformance
// suite opens the same device twice and talks to itself through the NIC.
package ibv
