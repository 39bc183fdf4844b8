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
