package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// NewGRPCServer builds the gRPC server: the ExternalScaler service, the standard health
// service (SERVING), request-latency metrics, TLS when tlsConfig is set, and — with a warm
// seat keeper — the end of each KEDA connection told to it.
func NewGRPCServer(s *Server, tlsConfig *tls.Config) (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(unaryMetrics),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A peer gone without closing (its node lost, a network partition) is noticed within
		// about 40 s, not gRPC's default two hours: its connection ends, and with it the warm
		// seats it asked for (conns).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	if s.Engine != nil && s.Engine.Seats != nil {
		opts = append(opts, grpc.StatsHandler(&conns{wants: s.Engine.Seats, clock: s.Engine.clock()}))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterExternalScalerServer(gs, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.ExternalScaler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	return gs, hs
}

// Serve runs gs on lis until ctx ends, then drains: health turns NOT_SERVING, in-flight calls
// get up to grace to finish, streams are cut after that.
func Serve(ctx context.Context, gs *grpc.Server, hs *health.Server, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gRPC server: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		gs.Stop()
	}
	return nil
}

func rpcName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

func unaryMetrics(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	requestDuration.WithLabelValues(rpcName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}
