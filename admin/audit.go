package admin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// audit is the unary interceptor that logs every mutating call
// (MutatingMethods) once it has run: the method, the request, the result,
// the peer's address and the identity that asked (Identity: the
// certificate identity or token fingerprint the Authorizer allowed;
// "anonymous" without an Authorizer). It is the one log line that says
// who changed the server; a refused call is logged by the Authorizer
// instead and never reaches it.
func (s *Server) audit(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !slices.Contains(MutatingMethods, info.FullMethod) {
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	id, ok := Identity(ctx)
	if !ok {
		id = "anonymous"
	}
	lvl := slog.LevelInfo
	args := []any{"method", info.FullMethod, "request", fmt.Sprint(req),
		"code", status.Code(err).String(), "peer", peerAddr(ctx), "identity", id}
	if err != nil {
		// The one line of a failed call: the handlers log theirs at debug.
		lvl = slog.LevelWarn
		args = append(args, "err", status.Convert(err).Message())
	}
	s.log.Log(ctx, lvl, "admin call", args...)
	return resp, err
}
