package clientmetrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/client/clientmetrics"
	seqd "github.com/seqd/seqd/server"
	_ "github.com/seqd/seqd/verbs/soft"
)

// startSeqd runs a seqd for the example; a real application dials its
// deployment's admin address instead.
func startSeqd(dir string) (addr string, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan seqd.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- seqd.Run(ctx, seqd.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: dir, Init: true},
			slog.New(slog.DiscardHandler), func(a seqd.Addrs) { ready <- a })
	}()
	select {
	case a := <-ready:
		return a.Admin, func() { cancel(); <-done }
	case err := <-done:
		panic(err)
	}
}

// Register a Collector for each Client with the registry the application
// serves on /metrics (prometheus.DefaultRegisterer, or its own).
func Example() {
	dir, _ := os.MkdirTemp("", "seqd-clientmetrics")
	defer os.RemoveAll(dir)
	addr, stop := startSeqd(dir)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(clientmetrics.New(c, prometheus.Labels{"client": "orders"}))

	for range 3 {
		if _, err := c.GetTimestamp(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		if mf.GetName() == "seqd_client_calls_total" {
			m := mf.GetMetric()[0]
			fmt.Println(mf.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
		if mf.GetName() == "seqd_client_call_duration_seconds" {
			fmt.Println(mf.GetName(), "count", mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// seqd_client_call_duration_seconds count 3
	// seqd_client_calls_total orders 3
}
