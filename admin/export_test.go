package admin

import (
	"time"

	"github.com/seqd/seqd/admin/adminpb"
)

// WithClock returns cfg with the clock of the Advance limits set to now.
func WithClock(cfg Config, now func() time.Time) Config {
	cfg.now = now
	return cfg
}

// ConnectCase is one validation case, exported for server_test.go.
type ConnectCase struct {
	Name  string
	Req   *adminpb.ConnectRequest
	Valid bool
}

// ConnectCases returns the validation table of validate_test.go with each
// request built, so the over-the-wire test runs the same cases.
func ConnectCases() []ConnectCase {
	out := make([]ConnectCase, len(connectCases))
	for i, tc := range connectCases {
		req := validConnect()
		tc.edit(req)
		out[i] = ConnectCase{tc.name, req, tc.valid}
	}
	return out
}

// ValidConnect returns a ConnectRequest that passes validation.
func ValidConnect() *adminpb.ConnectRequest { return validConnect() }

// SetQuotaClock makes s's Connect-rate buckets read now for the time.
func SetQuotaClock(s *Server, now func() time.Time) { s.quotas.now = now }
