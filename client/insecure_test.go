package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/server"
)

// Plaintext to an admin address off loopback: refused unless chosen with
// WithInsecure, and the refusal says what to pass. Nothing is sent: the
// refusal comes before any connection.
func TestPlaintextRefusedSaysWhatToPass(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, "198.51.100.1:7070", WithDevice("soft", "127.0.0.1:0", ""))
	if !errors.Is(err, adminclient.ErrPlaintextRefused) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Dial = %v, want ErrPlaintextRefused (and ErrUnavailable)", err)
	}
	for _, want := range []string{"client.WithInsecure()", "-insecure", "-tls-ca", "grpc.WithTransportCredentials"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// WithInsecure: a seqd whose admin and data planes are on 198.51.100.7
// (in a network namespace of the test's own), reached with the device
// chosen by route.
func TestWithInsecureOffLoopback(t *testing.T) {
	if !netnstest.Enter(t, "198.51.100.7/32") {
		return
	}
	// No admin credential (this test is about the plaintext dial): seqd
	// starts off loopback only when told to accept that.
	a := startServer(t, server.Config{Device: "198.51.100.7:0", Admin: "198.51.100.7:0", Security: server.SecurityConfig{InsecureNoAuth: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Dial(ctx, a.Admin); !errors.Is(err, adminclient.ErrPlaintextRefused) {
		t.Fatalf("Dial without WithInsecure = %v, want ErrPlaintextRefused", err)
	}
	c := dialT(t, a.Admin, WithInsecure())
	if !strings.HasPrefix(c.opts.device, "198.51.100.7:") {
		t.Errorf("device %q, want 198.51.100.7:0", c.opts.device)
	}
	if _, err := c.GetTimestamp(ctx); err != nil {
		t.Fatal(err)
	}
}

// seqd listening on every interface (admin on 0.0.0.0, the data plane on
// 0.0.0.0 with provider option advertise=): a client given the host's
// address reaches both.
func TestListenAllInterfaces(t *testing.T) {
	if !netnstest.Enter(t, "198.51.100.7/32") {
		return
	}
	a := startServer(t, server.Config{Device: "0.0.0.0:0", ProviderOpts: "advertise=198.51.100.7", Admin: "0.0.0.0:0",
		Security: server.SecurityConfig{InsecureNoAuth: true}})
	_, port, err := net.SplitHostPort(a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	c := dialT(t, net.JoinHostPort("198.51.100.7", port), WithInsecure())
	if c.sess.dataIP != netip.MustParseAddr("198.51.100.7") || !strings.HasPrefix(c.opts.device, "198.51.100.7:") {
		t.Errorf("server data plane %v, device %q; want 198.51.100.7 for both", c.sess.dataIP, c.opts.device)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetTimestamp(ctx); err != nil {
		t.Fatal(err)
	}
}
