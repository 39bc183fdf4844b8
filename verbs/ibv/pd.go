//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

var (
	_ verbs.PD = (*pd)(nil)
	_ verbs.MR = (*mr)(nil)
	_ verbs.AH = (*ah)(nil)
)

// pd is an ibv_pd. It indexes its memory regions by lkey so that a UD
// receive completion can find the GRH of its buffer without turning an
// address into a pointer.
type pd struct {
	dev  *device
	pd   *C.struct_ibv_pd
	life life

	mrMu sync.RWMutex
	mrs  map[uint32]*mr
}

// mr is an ibv_mr over anonymous memory mapped outside the Go heap.
type mr struct {
	pd     *pd
	mr     *C.struct_ibv_mr
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	closed atomic.Bool
}

// ah is an ibv_ah.
type ah struct {
	pd     *pd
	ah     *C.struct_ibv_ah
	closed atomic.Bool
}

// RegMR maps length bytes of anonymous memory and registers them.
func (p *pd) RegMR(length int, access verbs.Access) (verbs.MR, error) {
	if length <= 0 || (p.dev.attr.MaxMRSize != 0 && uint64(length) > p.dev.attr.MaxMRSize) {
		return nil, fmt.Errorf("%w: memory region of %d bytes", verbs.ErrInvalidArgument, length)
	}
	acc, err := accessToC(access)
	if err != nil {
		return nil, err
	}
	if err := p.life.acquire("ibv PD"); err != nil {
		return nil, err
	}
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		p.life.release()
		return nil, fmt.Errorf("ibv: mmap %d bytes: %w", length, err)
	}
	// buf is not Go memory, so C may keep the pointer.
	m, errno := C.seqd_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(length), acc)
	if m == nil {
		_ = unix.Munmap(buf)
		p.life.release()
		return nil, fmt.Errorf("ibv: ibv_reg_mr %d bytes: %w", length, errnoErr(errno))
	}
	r := &mr{pd: p, mr: m, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))),
		lkey: uint32(m.lkey), rkey: uint32(m.rkey)}
	p.mrMu.Lock()
	p.mrs[r.lkey] = r
	p.mrMu.Unlock()
	return r, nil
}

// grh gathers the 40-byte GRH area of a receive from sg (grhSGEs) into
// dst, if that memory is still registered.
func (p *pd) grh(dst *[verbs.GRHLen]byte, sg []verbs.SGE) bool {
	p.mrMu.RLock()
	defer p.mrMu.RUnlock()
	off := 0
	for _, s := range sg {
		m := p.mrs[s.LKey]
		if m == nil || s.Addr < m.addr || s.Addr-m.addr > uint64(len(m.buf)) || uint64(s.Length) > uint64(len(m.buf))-(s.Addr-m.addr) {
			return false
		}
		b := s.Addr - m.addr
		off += copy(dst[off:], m.buf[b:b+uint64(s.Length)])
	}
	return off == verbs.GRHLen
}

// CreateAH creates an address handle; see device.fillAH for defaults.
func (p *pd) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	if err := p.life.acquire("ibv PD"); err != nil {
		return nil, err
	}
	var a C.struct_ibv_ah_attr
	p.dev.fillAH(&a, attr)
	h, errno := C.ibv_create_ah(p.pd, &a)
	if h == nil {
		p.life.release()
		return nil, fmt.Errorf("ibv: ibv_create_ah to %v: %w", attr.Dest, errnoErr(errno))
	}
	return &ah{pd: p, ah: h}, nil
}

// Close deallocates the PD; its MRs, AHs and QPs must be closed first.
func (p *pd) Close() error {
	if err := p.life.close("ibv PD"); err != nil {
		return err
	}
	rc, errno := C.ibv_dealloc_pd(p.pd)
	p.dev.life.release()
	if rc != 0 {
		return fmt.Errorf("ibv: ibv_dealloc_pd: %w", rcErr(rc, errno))
	}
	return nil
}

// Bytes returns the region's memory, or nil once it is closed.
func (m *mr) Bytes() []byte {
	if m.closed.Load() {
		return nil
	}
	return m.buf
}

func (m *mr) Addr() uint64 { return m.addr }
func (m *mr) LKey() uint32 { return m.lkey }
func (m *mr) RKey() uint32 { return m.rkey }

// Close deregisters and unmaps the region. Slices from Bytes must not be
// used afterwards.
func (m *mr) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: ibv MR already closed", verbs.ErrClosed)
	}
	m.pd.mrMu.Lock()
	delete(m.pd.mrs, m.lkey)
	m.pd.mrMu.Unlock()
	rc, errno := C.ibv_dereg_mr(m.mr)
	if rc != 0 {
		// Still registered: keep the memory mapped so the NIC cannot
		// write into pages the kernel reuses.
		m.pd.life.release()
		return fmt.Errorf("ibv: ibv_dereg_mr: %w", rcErr(rc, errno))
	}
	err := unix.Munmap(m.buf)
	m.pd.life.release()
	if err != nil {
		return fmt.Errorf("ibv: munmap: %w", err)
	}
	return nil
}

// Close destroys the address handle.
func (a *ah) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: ibv AH already closed", verbs.ErrClosed)
	}
	rc, errno := C.ibv_destroy_ah(a.ah)
	a.pd.life.release()
	if rc != 0 {
		return fmt.Errorf("ibv: ibv_destroy_ah: %w", rcErr(rc, errno))
	}
	return nil
}
