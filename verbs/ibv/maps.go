//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/seqd/seqd/verbs"
)

// The verbs API copies some libibverbs values and renumbers others; every
// conversion here is explicit so that neither side depends on the other's
// numbering.

func accessToC(a verbs.Access) (C.int, error) {
	var c C.int
	for _, m := range []struct {
		v verbs.Access
		c C.int
	}{
		{verbs.AccessLocalWrite, C.IBV_ACCESS_LOCAL_WRITE},
		{verbs.AccessRemoteWrite, C.IBV_ACCESS_REMOTE_WRITE},
		{verbs.AccessRemoteRead, C.IBV_ACCESS_REMOTE_READ},
		{verbs.AccessRemoteAtomic, C.IBV_ACCESS_REMOTE_ATOMIC},
	} {
		if a&m.v != 0 {
			c |= m.c
			a &^= m.v
		}
	}
	if a != 0 {
		return 0, fmt.Errorf("%w: access flags 0x%x", verbs.ErrInvalidArgument, uint32(a))
	}
	return c, nil
}

var qpTypes = map[verbs.QPType]C.enum_ibv_qp_type{
	verbs.RC: C.IBV_QPT_RC,
	verbs.UC: C.IBV_QPT_UC,
	verbs.UD: C.IBV_QPT_UD,
}

var qpStates = [...]C.enum_ibv_qp_state{
	verbs.StateReset: C.IBV_QPS_RESET,
	verbs.StateInit:  C.IBV_QPS_INIT,
	verbs.StateRTR:   C.IBV_QPS_RTR,
	verbs.StateRTS:   C.IBV_QPS_RTS,
	verbs.StateSQD:   C.IBV_QPS_SQD,
	verbs.StateSQE:   C.IBV_QPS_SQE,
	verbs.StateErr:   C.IBV_QPS_ERR,
}

func qpStateToC(s verbs.QPState) (C.enum_ibv_qp_state, bool) {
	if int(s) >= len(qpStates) {
		return 0, false
	}
	return qpStates[s], true
}

func qpStateFromC(c C.enum_ibv_qp_state) (verbs.QPState, bool) {
	for s, v := range qpStates {
		if v == c {
			return verbs.QPState(s), true
		}
	}
	return 0, false
}

var mtus = [...]C.enum_ibv_mtu{
	verbs.MTU256:  C.IBV_MTU_256,
	verbs.MTU512:  C.IBV_MTU_512,
	verbs.MTU1024: C.IBV_MTU_1024,
	verbs.MTU2048: C.IBV_MTU_2048,
	verbs.MTU4096: C.IBV_MTU_4096,
}

func mtuToC(m verbs.MTU) (C.enum_ibv_mtu, bool) {
	if m.Bytes() == 0 || int(m) >= len(mtus) {
		return 0, false
	}
	return mtus[m], true
}

func mtuFromC(c C.enum_ibv_mtu) (verbs.MTU, bool) {
	for m, v := range mtus {
		if v == c && verbs.MTU(m).Bytes() != 0 {
			return verbs.MTU(m), true
		}
	}
	return 0, false
}

// attrMasks pairs each verbs attribute bit with its libibverbs bit.
var attrMasks = []struct {
	v verbs.QPAttrMask
	c C.int
}{
	{verbs.AttrState, C.IBV_QP_STATE},
	{verbs.AttrAccessFlags, C.IBV_QP_ACCESS_FLAGS},
	{verbs.AttrPKeyIndex, C.IBV_QP_PKEY_INDEX},
	{verbs.AttrPort, C.IBV_QP_PORT},
	{verbs.AttrQKey, C.IBV_QP_QKEY},
	{verbs.AttrAV, C.IBV_QP_AV},
	{verbs.AttrPathMTU, C.IBV_QP_PATH_MTU},
	{verbs.AttrTimeout, C.IBV_QP_TIMEOUT},
	{verbs.AttrRetryCnt, C.IBV_QP_RETRY_CNT},
	{verbs.AttrRNRRetry, C.IBV_QP_RNR_RETRY},
	{verbs.AttrRQPSN, C.IBV_QP_RQ_PSN},
	{verbs.AttrMaxQPRdAtomic, C.IBV_QP_MAX_QP_RD_ATOMIC},
	{verbs.AttrMinRNRTimer, C.IBV_QP_MIN_RNR_TIMER},
	{verbs.AttrSQPSN, C.IBV_QP_SQ_PSN},
	{verbs.AttrMaxDestRdAtomic, C.IBV_QP_MAX_DEST_RD_ATOMIC},
	{verbs.AttrDestQPN, C.IBV_QP_DEST_QPN},
}

func attrMaskToC(m verbs.QPAttrMask) (C.int, error) {
	var c C.int
	for _, a := range attrMasks {
		if m&a.v != 0 {
			c |= a.c
			m &^= a.v
		}
	}
	if m != 0 {
		return 0, fmt.Errorf("%w: QP attribute mask 0x%x", verbs.ErrInvalidArgument, uint32(m))
	}
	return c, nil
}

var opcodes = [...]C.uint32_t{
	verbs.OpSend:             C.IBV_WR_SEND,
	verbs.OpSendWithImm:      C.IBV_WR_SEND_WITH_IMM,
	verbs.OpRDMAWrite:        C.IBV_WR_RDMA_WRITE,
	verbs.OpRDMAWriteWithImm: C.IBV_WR_RDMA_WRITE_WITH_IMM,
	verbs.OpRDMARead:         C.IBV_WR_RDMA_READ,
	verbs.OpAtomicFetchAdd:   C.IBV_WR_ATOMIC_FETCH_AND_ADD,
	verbs.OpAtomicCmpSwap:    C.IBV_WR_ATOMIC_CMP_AND_SWP,
}

// sendFlags is indexed by verbs.SendFlags (4 bits).
var sendFlags = func() (t [16]C.uint32_t) {
	for f := range t {
		v := verbs.SendFlags(f)
		if v&verbs.Signaled != 0 {
			t[f] |= C.IBV_SEND_SIGNALED
		}
		if v&verbs.Inline != 0 {
			t[f] |= C.IBV_SEND_INLINE
		}
		if v&verbs.Fence != 0 {
			t[f] |= C.IBV_SEND_FENCE
		}
		if v&verbs.Solicited != 0 {
			t[f] |= C.IBV_SEND_SOLICITED
		}
	}
	return t
}()

func wcStatusFromC(s C.uint32_t) verbs.WCStatus {
	switch s {
	case C.IBV_WC_SUCCESS:
		return verbs.WCSuccess
	case C.IBV_WC_LOC_LEN_ERR:
		return verbs.WCLocLenErr
	case C.IBV_WC_LOC_QP_OP_ERR:
		return verbs.WCLocQPOpErr
	case C.IBV_WC_LOC_PROT_ERR:
		return verbs.WCLocProtErr
	case C.IBV_WC_WR_FLUSH_ERR:
		return verbs.WCWRFlushErr
	case C.IBV_WC_REM_INV_REQ_ERR:
		return verbs.WCRemInvReqErr
	case C.IBV_WC_REM_ACCESS_ERR:
		return verbs.WCRemAccessErr
	case C.IBV_WC_REM_OP_ERR:
		return verbs.WCRemOpErr
	case C.IBV_WC_RETRY_EXC_ERR:
		return verbs.WCRetryExcErr
	case C.IBV_WC_RNR_RETRY_EXC_ERR:
		return verbs.WCRNRRetryExcErr
	}
	// The rest (EEC, MW, bad response, local access, abort, fatal, ...)
	// have no verbs name; WC.VendorErr keeps the details.
	return verbs.WCGeneralErr
}

func wcOpcodeFromC(o C.uint32_t) verbs.WCOpcode {
	switch o {
	case C.IBV_WC_SEND:
		return verbs.WCSend
	case C.IBV_WC_RDMA_WRITE:
		return verbs.WCRDMAWrite
	case C.IBV_WC_RDMA_READ:
		return verbs.WCRDMARead
	case C.IBV_WC_COMP_SWAP:
		return verbs.WCCompSwap
	case C.IBV_WC_FETCH_ADD:
		return verbs.WCFetchAdd
	case C.IBV_WC_RECV:
		return verbs.WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return verbs.WCRecvRDMAWithImm
	}
	return 0
}

func wcFlagsFromC(f C.uint32_t) verbs.WCFlags {
	var v verbs.WCFlags
	if f&C.IBV_WC_WITH_IMM != 0 {
		v |= verbs.WCWithImm
	}
	if f&C.IBV_WC_GRH != 0 {
		v |= verbs.WCGRH
	}
	return v
}
