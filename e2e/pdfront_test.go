package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/pdfront"
)

// startPDFront serves seqd-pd as the README starts it (-listen
// 127.0.0.1:3379 -admin 127.0.0.1:7070) until t ends.
func startPDFront(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "127.0.0.1:7070")
	if err != nil {
		t.Fatalf("seqd-pd: dial seqd: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:3379")
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	srv, err := pdfront.New(pdfront.Config{ClusterID: 1, URL: "http://127.0.0.1:3379"}, pdfront.NewClientSource(c))
	if err != nil {
		c.Close()
		lis.Close()
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.RegisterGRPC(g)
	go g.Serve(lis)
	t.Cleanup(func() { g.Stop(); c.Close() })
}
