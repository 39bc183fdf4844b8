package verbs

// BatchPoster is an optional capability of a QP: post receives to it and
// sends to sq (a QP of the same device, or itself) in one call into the
// provider. A loop that polls one CQ shared by its receives and sends and
// then posts through PostBatch crosses into the provider twice per batch;
// on the ibv provider each crossing is a cgo call.
type BatchPoster interface {
	PostBatch(recvs []RecvWR, sq QP, sends []SendWR) (nrecv, nsend int, err error)
}

// PostBatch posts recvs to rq and sends to sq (of the same device): with
// one provider call where rq implements BatchPoster, else with PostRecv
// and then PostSend.
// It returns how many of each were posted; on an error, the receives
// before the failure were posted and no send was, unless the receives
// all were.
func PostBatch(rq QP, recvs []RecvWR, sq QP, sends []SendWR) (nrecv, nsend int, err error) {
	if bp, ok := rq.(BatchPoster); ok {
		return bp.PostBatch(recvs, sq, sends)
	}
	if len(recvs) > 0 {
		if nrecv, err = rq.PostRecv(recvs); err != nil {
			return nrecv, 0, err
		}
	}
	if len(sends) > 0 {
		nsend, err = sq.PostSend(sends)
	}
	return nrecv, nsend, err
}

// RecvChain is a chain of receives for one QP, for PostMany.
type RecvChain struct {
	QP     QP
	WRs    []RecvWR
	Posted int // set by PostMany: how many of WRs were posted
}

// ManyPoster is an optional capability of a device: post receive chains
// to several of its QPs and a send chain to one in one call into the
// provider (a server's batch re-posts the receives of every request QP it
// drained, and answers through one response QP).
type ManyPoster interface {
	PostMany(recvs []RecvChain, sq QP, sends []SendWR) (nsend int, err error)
}

// PostMany posts every chain of recvs (setting its Posted), then sends to
// sq (nil: none): with one provider call where dev implements
// ManyPoster, else with a PostRecv per chain and a PostSend. It stops at
// the first error; the chains after it have Posted 0.
func PostMany(dev Device, recvs []RecvChain, sq QP, sends []SendWR) (int, error) {
	if mp, ok := dev.(ManyPoster); ok {
		return mp.PostMany(recvs, sq, sends)
	}
	for i := range recvs {
		recvs[i].Posted = 0
	}
	for i := range recvs {
		r := &recvs[i]
		if len(r.WRs) == 0 {
			continue
		}
		n, err := r.QP.PostRecv(r.WRs)
		r.Posted = n
		if err != nil {
			return 0, err
		}
	}
	if sq == nil || len(sends) == 0 {
		return 0, nil
	}
	return sq.PostSend(sends)
}
