package main

import (
	"context"
	"flag"
	"fmt"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// runHealth asks the grpc.health.v1 service for the server's status and
// fails unless it is SERVING, so it can serve as a container HEALTHCHECK.
// Given a list, it asks the first member that answers.
func runHealth(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	service := fs.String("service", "", "the service to check; empty checks the server as a whole")
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	var st healthpb.HealthCheckResponse_ServingStatus
	addr, err := e.onAny(ctx, func(_ string, cc *grpc.ClientConn) error {
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: *service})
		st = resp.GetStatus()
		return err
	})
	if err != nil {
		return err
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s reports %s", addr, st)
	}
	fmt.Fprintln(e.stdout, healthpb.HealthCheckResponse_SERVING)
	return nil
}
