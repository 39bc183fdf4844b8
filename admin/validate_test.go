package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// validConnect returns a ConnectRequest that passes validation with the
// default Config; each bad case below breaks exactly one thing.
func validConnect() *adminpb.ConnectRequest {
	return &adminpb.ConnectRequest{
		Qps: []*adminpb.Endpoint{
			{Address: make([]byte, 20), Qpn: 1},
			{Address: make([]byte, 20), Qpn: 1<<24 - 1},
		},
		Window:     DefaultMaxWindow,
		Mode:       spec.ModeSpecS0,
		ClientName: "loadgen-0",
	}
}

// ConnectCases are the validation cases, shared with the over-the-wire test
// in server_test.go through export_test.go.
var connectCases = []struct {
	name  string
	edit  func(*adminpb.ConnectRequest)
	valid bool
}{
	{"valid", func(*adminpb.ConnectRequest) {}, true},
	{"empty mode", func(r *adminpb.ConnectRequest) { r.Mode = "" }, true},
	{"herd mode", func(r *adminpb.ConnectRequest) { r.Mode = spec.ModeHERD }, true},
	{"max qps", func(r *adminpb.ConnectRequest) {
		r.Qps = nil
		for i := range DefaultMaxQPsPerClient {
			r.Qps = append(r.Qps, &adminpb.Endpoint{Address: make([]byte, 20), Qpn: uint32(i + 1)})
		}
	}, true},
	{"longest name", func(r *adminpb.ConnectRequest) { r.ClientName = strings.Repeat("n", MaxClientNameLen) }, true},
	{"window 1", func(r *adminpb.ConnectRequest) { r.Window = 1 }, true},

	{"no qps", func(r *adminpb.ConnectRequest) { r.Qps = nil }, false},
	{"too many qps", func(r *adminpb.ConnectRequest) {
		r.Qps = nil
		for i := range DefaultMaxQPsPerClient + 1 {
			r.Qps = append(r.Qps, &adminpb.Endpoint{Address: make([]byte, 20), Qpn: uint32(i + 1)})
		}
	}, false},
	{"nil address", func(r *adminpb.ConnectRequest) { r.Qps[1].Address = nil }, false},
	{"short address", func(r *adminpb.ConnectRequest) { r.Qps[0].Address = make([]byte, 19) }, false},
	{"long address", func(r *adminpb.ConnectRequest) { r.Qps[0].Address = make([]byte, 21) }, false},
	{"qpn 0", func(r *adminpb.ConnectRequest) { r.Qps[0].Qpn = 0 }, false},
	{"qpn 2^24", func(r *adminpb.ConnectRequest) { r.Qps[1].Qpn = 1 << 24 }, false},
	{"duplicate qp", func(r *adminpb.ConnectRequest) { r.Qps[1].Qpn = r.Qps[0].Qpn }, false},
	{"window 0", func(r *adminpb.ConnectRequest) { r.Window = 0 }, false},
	{"window above max", func(r *adminpb.ConnectRequest) { r.Window = DefaultMaxWindow + 1 }, false},
	{"name too long", func(r *adminpb.ConnectRequest) { r.ClientName = strings.Repeat("n", MaxClientNameLen+1) }, false},
	{"unknown mode", func(r *adminpb.ConnectRequest) { r.Mode = "rdma-magic" }, false},
	{"mode case matters", func(r *adminpb.ConnectRequest) { r.Mode = "Spec-S0" }, false},
}

func TestValidateConnect(t *testing.T) {
	cfg, err := Config{}.validate()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range connectCases {
		t.Run(tc.name, func(t *testing.T) {
			req := validConnect()
			tc.edit(req)
			err := cfg.validateConnect(req)
			if tc.valid && err != nil {
				t.Fatalf("validateConnect: %v, want nil", err)
			}
			if !tc.valid && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("validateConnect: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg, err := Config{}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != DefaultAddr || cfg.MaxRecvMsgSize != 64<<10 || cfg.MaxQPsPerClient != DefaultMaxQPsPerClient ||
		cfg.MaxWindow != DefaultMaxWindow || !slices.Equal(cfg.Modes, spec.Modes) || cfg.Logger == nil {
		t.Fatalf("defaults not filled: %+v", cfg)
	}
	for _, bad := range []Config{
		{MaxRecvMsgSize: -1},
		{MaxQPsPerClient: -1},
		{MaxWindow: -1},
		{Modes: []string{""}},
		{Modes: []string{"a", "a"}},
	} {
		if _, err := bad.validate(); err == nil {
			t.Errorf("validate(%+v) = nil, want error", bad)
		}
	}
}

func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{fmt.Errorf("%w: recovering", ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("%w: 0 QPs free", ErrNoCapacity), codes.ResourceExhausted},
		{fmt.Errorf("%w: session 9", ErrUnknownSession), codes.NotFound},
		{fmt.Errorf("%w: mode herd not running", ErrFailedPrecondition), codes.FailedPrecondition},
		{ErrInvalidArgument, codes.InvalidArgument},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Aborted, "lost leadership")), codes.Aborted},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{fmt.Errorf("persist: %w", context.Canceled), codes.Canceled},
		{errors.New("disk on fire"), codes.Internal},
	} {
		got := statusError(tc.err)
		if c := status.Code(got); c != tc.want {
			t.Errorf("statusError(%v) code %v, want %v", tc.err, c, tc.want)
		}
		if tc.err != nil && status.Convert(got).Message() == "" {
			t.Errorf("statusError(%v) lost the message", tc.err)
		}
	}
}
