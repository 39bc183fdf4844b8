// Command hanode is a minimal seqd HA instance for the process-level fault
// tests of package ha (kill -9, SIGSTOP): an ha.Node, the data plane under
// haserve on the soft provider, and the admin server. seqd itself wires
// the same pieces from its -etcd-endpoints flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/haserve"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

func main() {
	etcd := flag.String("etcd", "", "etcd client URLs, comma-separated")
	adm := flag.String("admin", "127.0.0.1:0", "admin listen address")
	dev := flag.String("device", "127.0.0.1:0", "soft device address")
	prefix := flag.String("prefix", ha.DefaultPrefix, "etcd key prefix")
	ttl := flag.Duration("ttl", ha.DefaultTTL, "leadership lease TTL")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*etcd, *adm, *dev, *prefix, *ttl, log); err != nil {
		log.Error("hanode", "err", err)
		os.Exit(1)
	}
}

func run(etcd, admAddr, devAddr, prefix string, ttl time.Duration, log *slog.Logger) error {
	lis, err := net.Listen("tcp", admAddr)
	if err != nil {
		return err
	}
	node, err := ha.New(ha.Config{Endpoints: strings.Split(etcd, ","), Prefix: prefix, Advertise: lis.Addr().String(), TTL: ttl, Logger: log})
	if err != nil {
		return err
	}
	defer node.Close()
	d, err := verbs.Open("soft", devAddr, verbs.Options{})
	if err != nil {
		return err
	}
	defer d.Close()
	srv, err := haserve.New(haserve.Config{Node: node, Modes: modes.Config{Device: d, Workers: 1}, Logger: log})
	if err != nil {
		return err
	}
	a, err := admin.New(admin.Config{Logger: log}, srv)
	if err != nil {
		return err
	}
	go a.Serve(lis)
	defer a.Stop()
	fmt.Printf("ADMIN %s\n", lis.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv.Run(ctx)
	return nil
}
