package client

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/verbs"
)

func TestLocalAddrFor(t *testing.T) {
	for _, tc := range []struct {
		dst     string
		want    func(netip.Addr) bool
		wantErr bool
	}{
		{dst: "127.0.0.1", want: func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }},
		// Another loopback address: the kernel sends from a loopback one.
		{dst: "127.0.0.2", want: netip.Addr.IsLoopback},
		{dst: "::ffff:127.0.0.1", want: func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }},
		{dst: "0.0.0.0", wantErr: true},
		{dst: "::1", wantErr: true},
	} {
		t.Run(tc.dst, func(t *testing.T) {
			got, err := localAddrFor(netip.MustParseAddr(tc.dst))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("localAddrFor(%s) = %v, want an error", tc.dst, got)
				}
				return
			}
			if err != nil || !got.Is4() || !tc.want(got) {
				t.Fatalf("localAddrFor(%s) = %v, %v", tc.dst, got, err)
			}
		})
	}
}

func TestHostAddr(t *testing.T) {
	ctx := context.Background()
	if a, err := hostAddr(ctx, "127.0.0.9:7070"); err != nil || a != netip.MustParseAddr("127.0.0.9") {
		t.Errorf("hostAddr(127.0.0.9:7070) = %v, %v", a, err)
	}
	if a, err := hostAddr(ctx, "localhost:7070"); err != nil || !a.IsLoopback() || !a.Is4() {
		t.Errorf("hostAddr(localhost:7070) = %v, %v", a, err)
	}
	if _, err := hostAddr(ctx, "no-port"); err == nil {
		t.Error("hostAddr(no-port): no error")
	}
}

func TestServerDataIP(t *testing.T) {
	enc := func(ip string) []byte {
		a := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr(ip)), Port: 4791}
		b, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		resp *adminpb.ConnectResponse
		want netip.Addr
	}{
		{"spec-s0", &adminpb.ConnectResponse{ServerQps: []*adminpb.Endpoint{{Address: enc("198.51.100.7")}}}, netip.MustParseAddr("198.51.100.7")},
		{"herd", &adminpb.ConnectResponse{ServerConnQps: []*adminpb.Endpoint{{Address: enc("203.0.113.9")}}}, netip.MustParseAddr("203.0.113.9")},
		{"garbage first", &adminpb.ConnectResponse{ServerQps: []*adminpb.Endpoint{{Address: []byte{1}}, {Address: enc("198.51.100.8")}}}, netip.MustParseAddr("198.51.100.8")},
		{"none", &adminpb.ConnectResponse{}, netip.Addr{}},
	} {
		if got := serverDataIP(tc.resp); got != tc.want {
			t.Errorf("%s: serverDataIP = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Without WithDevice the client binds the route's local address.
func TestDialBindsByRoute(t *testing.T) {
	a := startServer(t, server.Config{})
	c := dialT(t, a.Admin)
	if !strings.HasPrefix(c.opts.device, "127.0.0.1:") {
		t.Fatalf("device %q, want 127.0.0.1:0 (the route to the server)", c.opts.device)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetTimestamp(ctx); err != nil {
		t.Fatal(err)
	}
	// Provider soft with no device: by route too, with the options.
	c2 := dialT(t, a.Admin, WithDevice("soft", "", "queues=2"))
	if !strings.HasPrefix(c2.opts.device, "127.0.0.1:") || c2.opts.provOpts["queues"] != "2" {
		t.Fatalf("WithDevice(soft, \"\", queues=2): device %q, options %v", c2.opts.device, c2.opts.provOpts)
	}
	if _, err := c2.GetTimestamp(ctx); err != nil {
		t.Fatal(err)
	}
}

// A server whose data plane is on another address than its admin plane:
// the client binds again on the address of the route to the data plane.
// It runs in a network namespace of its own (needs root and unshare),
// with 198.51.100.7 on its loopback device.
func TestDialRebindsToDataPlaneRoute(t *testing.T) {
	if !netnstest.Enter(t, "198.51.100.7/32") {
		return
	}
	a := startServer(t, server.Config{Device: "198.51.100.7:0"})
	c := dialT(t, a.Admin) // 127.0.0.1:port: the first guess is 127.0.0.1
	if !strings.HasPrefix(c.opts.device, "198.51.100.7:") {
		t.Fatalf("device %q, want 198.51.100.7:0 (the route to the data plane)", c.opts.device)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetTimestamp(ctx); err != nil {
		t.Fatal(err)
	}
}
