//go:build ibverbs && cgo

package ibv

/*
#cgo LDFLAGS: -libverbs
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/Mellanox/rdmamap"
	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

func init() { verbs.Register("ibv", open) }

var (
	_ verbs.Device   = (*device)(nil)
	_ verbs.Counters = (*device)(nil)
)

// device is an open ibv_context bound to one port and one source GID.
type device struct {
	ctx      *C.struct_ibv_context
	name     string
	port     uint8 // physical port
	gidIndex uint8
	tclass   uint8 // default traffic class (tclass option)
	addr     verbs.Address
	attr     verbs.DeviceAttr
	life     life

	async     asyncState
	objs      asyncObjs
	asyncFile *os.File
	asyncDone chan struct{}
	asyncStop atomic.Bool

	// crossings counts calls from Go into the driver on the data path
	// (post and poll), for the provider_crossings counter.
	crossings atomic.Uint64
	many      manyScratch // PostMany's
}

// open is the provider entry point (see the package documentation).
func open(name string, opts verbs.Options) (verbs.Device, error) {
	cfg, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	var num C.int
	list, errno := C.ibv_get_device_list(&num)
	if list == nil {
		return nil, fmt.Errorf("%w: ibv_get_device_list: %s", verbs.ErrNoDevice, errnoString(errno))
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, int(num))
	for i := range names {
		names[i] = C.GoString(C.seqd_device_name(list, C.int(i)))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: ibv_get_device_list returned no devices (is the NIC's rdma-core provider installed?)", verbs.ErrNoDevice)
	}
	idx, err := findDevice(names, name)
	if err != nil {
		return nil, err
	}
	devs := unsafe.Slice(list, int(num))
	ctx, errno := C.ibv_open_device(devs[idx])
	if ctx == nil {
		return nil, fmt.Errorf("ibv: ibv_open_device %s: %w", names[idx], errnoErr(errno))
	}
	d := &device{ctx: ctx, name: names[idx], port: cfg.port}
	if err := d.query(cfg); err != nil {
		C.ibv_close_device(ctx)
		return nil, err
	}
	if err := d.startAsync(); err != nil {
		C.ibv_close_device(ctx)
		return nil, err
	}
	return d, nil
}

// findDevice returns the index in names of the device called name, which
// may be an RDMA device name (mlx5_0) or the name of a network interface
// (eth0) backed by one; "" means the first device.
func findDevice(names []string, name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	for i, n := range names {
		if n == name {
			return i, nil
		}
	}
	rdma, err := rdmamap.GetRdmaDeviceForNetdevice(name)
	if err == nil && rdma != "" {
		for i, n := range names {
			if n == rdma {
				return i, nil
			}
		}
	}
	why := ""
	if err != nil {
		why = fmt.Sprintf(" (as a network interface: %v)", err)
	}
	return 0, fmt.Errorf("%w: %q is neither an RDMA device nor a network interface backed by one%s; have %s",
		verbs.ErrNoDevice, name, why, strings.Join(names, ", "))
}

// query fills the device's attributes, port address and GID index.
func (d *device) query(cfg config) (err error) {
	var da C.struct_ibv_device_attr
	if rc, errno := C.ibv_query_device(d.ctx, &da); rc != 0 {
		return fmt.Errorf("ibv: ibv_query_device %s: %w", d.name, rcErr(rc, errno))
	}
	if cfg.port > uint8(da.phys_port_cnt) {
		return fmt.Errorf("%w: ibv option port=%d: %s has %d ports", verbs.ErrInvalidArgument, cfg.port, d.name, da.phys_port_cnt)
	}
	var pa C.struct_ibv_port_attr
	if rc, errno := C.seqd_query_port(d.ctx, C.uint8_t(d.port), &pa); rc != 0 {
		return fmt.Errorf("ibv: ibv_query_port %s port %d: %w", d.name, d.port, rcErr(rc, errno))
	}
	mtu, _ := mtuFromC(pa.active_mtu)
	d.attr = verbs.DeviceAttr{
		MaxQP:       int(da.max_qp),
		MaxQPWR:     int(da.max_qp_wr),
		MaxSGE:      int(da.max_sge),
		MaxCQE:      int(da.max_cqe),
		MaxMRSize:   uint64(da.max_mr_size),
		MaxInline:   0, // libibverbs reports inline capacity per QP only
		MaxRdAtomic: int(da.max_qp_rd_atom),
		ActiveMTU:   mtu,
		Queues:      0, // every hardware QP is its own engine; see doc.go
	}
	be, ok := atomicBigEndian(int(da.atomic_cap), hostBigEndian(), cfg.atomicOrder)
	d.attr.AtomicBigEndian = be
	if !ok {
		d.attr.MaxRdAtomic = 0 // IBV_ATOMIC_NONE: no atomics to read
	}
	if cfg.tclass > 0 {
		d.tclass = uint8(cfg.tclass)
	}
	gi := cfg.gidIndex
	if gi < 0 && pa.link_layer == C.IBV_LINK_LAYER_INFINIBAND {
		gi = 0 // InfiniBand: no RoCE GID types
	} else if gi < 0 {
		gi, err = pickGID(d.gidTable(int(pa.gid_tbl_len)*int(da.phys_port_cnt)), int(d.port), cfg.gidIPv6)
		if err != nil {
			return fmt.Errorf("ibv: %s: %w", d.name, err)
		}
	}
	if gi >= int(pa.gid_tbl_len) {
		return fmt.Errorf("%w: ibv option gid_index=%d: port %d of %s has %d GIDs", verbs.ErrInvalidArgument, gi, d.port, d.name, pa.gid_tbl_len)
	}
	var gid C.union_ibv_gid
	if rc, errno := C.ibv_query_gid(d.ctx, C.uint8_t(d.port), C.int(gi), &gid); rc != 0 {
		return fmt.Errorf("ibv: ibv_query_gid %s port %d index %d: %w", d.name, d.port, gi, rcErr(rc, errno))
	}
	d.gidIndex = uint8(gi)
	d.addr = verbs.Address{GID: *(*verbs.GID)(unsafe.Pointer(&gid)), LID: uint16(pa.lid)}
	return nil
}

// gidTable reads up to n valid entries of the device's GID tables (all
// ports), or nil if the kernel cannot say (then GID types are unknown).
func (d *device) gidTable(n int) []gidEntry {
	if n <= 0 {
		return nil
	}
	buf := (*C.struct_ibv_gid_entry)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.struct_ibv_gid_entry{}))))
	if buf == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(buf))
	got := C.seqd_query_gid_table(d.ctx, buf, C.size_t(n))
	if got <= 0 {
		return nil
	}
	out := make([]gidEntry, 0, int(got))
	for _, e := range unsafe.Slice(buf, int(got)) {
		out = append(out, gidEntry{
			GID:   *(*verbs.GID)(unsafe.Pointer(&e.gid)),
			Index: int(e.gid_index),
			Port:  int(e.port_num),
			Type:  int(e.gid_type),
		})
	}
	return out
}

// Name returns the RDMA device name, such as mlx5_0.
func (d *device) Name() string { return d.name }

// Attr returns the limits read when the device was opened.
func (d *device) Attr() verbs.DeviceAttr { return d.attr }

// RecvBuffer (verbs.RecvBufferer): a NIC holds no datagram outside the
// posted receives, so only they limit what a QP takes.
func (d *device) RecvBuffer(int) int { return math.MaxInt }

// VisitCounters reports the port's sysfs counters and hw_counters.
func (d *device) VisitCounters(f func(name string, value uint64)) {
	if f == nil || d.life.isClosed() {
		return
	}
	d.async.visit(f)
	f(verbs.CounterProviderCrossings, d.crossings.Load())
	visitSysfsCounters(sysfsRoot, d.name, d.port, f)
}

// AllocPD allocates a protection domain.
func (d *device) AllocPD() (verbs.PD, error) {
	if err := d.life.acquire("ibv device " + d.name); err != nil {
		return nil, err
	}
	p, errno := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		d.life.release()
		return nil, fmt.Errorf("ibv: ibv_alloc_pd: %w", errnoErr(errno))
	}
	return &pd{dev: d, pd: p, mrs: map[uint32]*mr{}}, nil
}

// Close closes the device; its PDs and CQs must be closed first.
func (d *device) Close() error {
	if err := d.life.close("ibv device " + d.name); err != nil {
		return err
	}
	d.stopAsync()
	if rc, errno := C.ibv_close_device(d.ctx); rc != 0 {
		return fmt.Errorf("ibv: ibv_close_device: %w", rcErr(rc, errno))
	}
	d.ctx = nil
	return nil
}

// physPort maps a verbs port number to the physical port: 0 and 1 mean
// the port the device was opened on (the bring-up helpers in verbs always
// say 1); larger values are physical port numbers.
func (d *device) physPort(p uint8) C.uint8_t {
	if p <= 1 {
		return C.uint8_t(d.port)
	}
	return C.uint8_t(p)
}

// fillAH converts an AHAttr. Every address handle is global (RoCE needs the
// GRH): SGIDIndex 0 means the device's gid_index, HopLimit 0 means 64.
func (d *device) fillAH(a *C.struct_ibv_ah_attr, v verbs.AHAttr) {
	*a = C.struct_ibv_ah_attr{}
	a.is_global = 1
	*(*verbs.GID)(unsafe.Pointer(&a.grh.dgid)) = v.Dest.GID
	a.grh.sgid_index = C.uint8_t(v.SGIDIndex)
	if v.SGIDIndex == 0 {
		a.grh.sgid_index = C.uint8_t(d.gidIndex)
	}
	a.grh.hop_limit = C.uint8_t(v.HopLimit)
	if v.HopLimit == 0 {
		a.grh.hop_limit = 64
	}
	a.grh.traffic_class = C.uint8_t(v.TrafficClass)
	if v.TrafficClass == 0 {
		a.grh.traffic_class = C.uint8_t(d.tclass)
	}
	a.dlid = C.uint16_t(v.Dest.LID)
	a.port_num = d.physPort(v.PortNum)
}

// hostBigEndian reports whether the host stores words big endian.
func hostBigEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 0
}

// errnoString renders an errno as "function not implemented (ENOSYS)".
func errnoString(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		if name := unix.ErrnoName(e); name != "" {
			return fmt.Sprintf("%v (%s)", e, name)
		}
		return e.Error()
	}
	return "unknown error"
}

// errnoErr turns the errno of a failed call into an error that wraps the
// matching verbs sentinel where there is one.
func errnoErr(err error) error {
	var e syscall.Errno
	if !errors.As(err, &e) || e == 0 {
		return errors.New("unknown error")
	}
	switch e {
	case syscall.EINVAL:
		return fmt.Errorf("%w: %s", verbs.ErrInvalidArgument, errnoString(e))
	case syscall.EOPNOTSUPP, syscall.ENOSYS:
		return fmt.Errorf("%w: %s", verbs.ErrNotSupported, errnoString(e))
	case syscall.EBUSY:
		return fmt.Errorf("%w: %s", verbs.ErrBusy, errnoString(e))
	}
	return fmt.Errorf("%s: %w", errnoString(e), e)
}

// rcErr is errnoErr for calls that return an errno (positive) or -1 with
// errno set.
func rcErr(rc C.int, errno error) error {
	if rc > 0 {
		return errnoErr(syscall.Errno(rc))
	}
	if rc < 0 && errno == nil {
		return errnoErr(syscall.Errno(-rc))
	}
	return errnoErr(errno)
}
