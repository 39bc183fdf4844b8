package adminclient

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Redirects: a standby (an instance that does not lead the HA group)
// answers Connect with Unavailable carrying an ErrorInfo whose Reason is
// ReasonNotLeader and whose Metadata[MetaLeader] is the leader's admin
// address (empty when no leader is known yet). Clients follow it.
const (
	ReasonNotLeader = "NOT_LEADER"
	ErrorDomain     = "seqd.admin.v1"
	MetaLeader      = "leader"
)

// RedirectError is the status error a standby returns, naming leader.
func RedirectError(leader string) error {
	msg := "not the leader; leader unknown, retry"
	if leader != "" {
		msg = "not the leader; leader is " + leader
	}
	st, err := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonNotLeader,
		Domain:   ErrorDomain,
		Metadata: map[string]string{MetaLeader: leader},
	})
	if err != nil { // cannot happen: ErrorInfo always marshals
		return status.Error(codes.Unavailable, msg)
	}
	return st.Err()
}

// LeaderFromError reports whether err is a standby's redirect, and the
// leader it names ("" when the standby knows none).
func LeaderFromError(err error) (leader string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.Unavailable {
		return "", false
	}
	for _, d := range st.Details() {
		if ei, isInfo := d.(*errdetails.ErrorInfo); isInfo && ei.GetReason() == ReasonNotLeader && ei.GetDomain() == ErrorDomain {
			return ei.GetMetadata()[MetaLeader], true
		}
	}
	return "", false
}
