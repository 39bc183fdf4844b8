package verbs

import "fmt"

type transition struct{ from, to QPState }

// required attributes per QP type and transition (IBTA, as libibverbs
// documents for ibv_modify_qp).
var requiredAttrs = map[QPType]map[transition]QPAttrMask{
	UD: {
		{StateReset, StateInit}: AttrPKeyIndex | AttrPort | AttrQKey,
		{StateInit, StateRTR}:   0,
		{StateRTR, StateRTS}:    AttrSQPSN,
	},
	UC: {
		{StateReset, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		{StateInit, StateRTR}:   AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
		{StateRTR, StateRTS}:    AttrSQPSN,
	},
	RC: {
		{StateReset, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		{StateInit, StateRTR}: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN |
			AttrMaxDestRdAtomic | AttrMinRNRTimer,
		{StateRTR, StateRTS}: AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry |
			AttrMaxQPRdAtomic,
	},
}

// optional attributes per QP type and transition.
var optionalAttrs = map[QPType]map[transition]QPAttrMask{
	UD: {
		{StateInit, StateInit}: AttrPKeyIndex | AttrPort | AttrQKey,
		{StateRTS, StateRTS}:   AttrQKey,
	},
	UC: {
		{StateInit, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		{StateInit, StateRTR}:  AttrAccessFlags | AttrPKeyIndex,
		{StateRTR, StateRTS}:   AttrAccessFlags,
		{StateRTS, StateRTS}:   AttrAccessFlags,
	},
	RC: {
		{StateInit, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		{StateInit, StateRTR}:  AttrAccessFlags | AttrPKeyIndex,
		{StateRTR, StateRTS}:   AttrAccessFlags | AttrMinRNRTimer,
		{StateRTS, StateRTS}:   AttrAccessFlags | AttrMinRNRTimer,
	},
}

// CheckModify validates a Modify call on a QP of type t in state cur, as
// libibverbs and the IBTA specify: the transition must be allowed, every
// attribute it requires must be in mask, and no attribute outside the
// required and optional sets may be. Moves to RESET and ERR are allowed
// from every state. Providers call it so that they all refuse the same
// calls; it returns the state the QP moves to.
func CheckModify(t QPType, cur QPState, attr *QPAttr, mask QPAttrMask) (QPState, error) {
	if attr == nil {
		return cur, fmt.Errorf("%w: nil QP attributes", ErrInvalidArgument)
	}
	req, ok := requiredAttrs[t]
	if !ok {
		return cur, fmt.Errorf("%w: QP type %v", ErrInvalidArgument, t)
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if next == StateReset || next == StateErr {
		return next, nil
	}
	tr := transition{cur, next}
	need, ok := req[tr]
	opt := optionalAttrs[t][tr]
	if !ok && opt == 0 {
		return cur, fmt.Errorf("%w: %v QP %v→%v", ErrBadTransition, t, cur, next)
	}
	have := mask &^ AttrState
	if missing := need &^ have; missing != 0 {
		return cur, fmt.Errorf("%w: %v QP %v→%v needs attribute mask 0x%x", ErrInvalidArgument, t, cur, next, uint32(missing))
	}
	if extra := have &^ (need | opt); extra != 0 {
		return cur, fmt.Errorf("%w: %v QP %v→%v does not take attribute mask 0x%x", ErrInvalidArgument, t, cur, next, uint32(extra))
	}
	if have&AttrPathMTU != 0 && attr.PathMTU.Bytes() == 0 {
		return cur, fmt.Errorf("%w: path MTU %d", ErrInvalidArgument, attr.PathMTU)
	}
	if have&AttrDestQPN != 0 && attr.DestQPN > MaxQPN {
		return cur, fmt.Errorf("%w: destination %v", ErrInvalidArgument, attr.DestQPN)
	}
	if have&(AttrSQPSN|AttrRQPSN) != 0 && (attr.SQPSN > PSNMask || attr.RQPSN > PSNMask) {
		return cur, fmt.Errorf("%w: PSN above 24 bits", ErrInvalidArgument)
	}
	return next, nil
}
