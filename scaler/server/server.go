package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/targets"
)

// Server implements KEDA's ExternalScaler service. StreamMetricSpec is left unimplemented:
// berth's targets only change with the ScaledObject, and KEDA falls back to GetMetricSpec.
type Server struct {
	pb.UnimplementedExternalScalerServer
	Engine *Engine
	// StreamInterval is how often StreamIsActive re-evaluates (default 1s).
	StreamInterval time.Duration
	// Clock drives StreamIsActive's ticker in tests (default the real clock).
	Clock clock.WithTicker
	// Stopping, when closed, ends every StreamIsActive stream at once (process shutdown): KEDA
	// reconnects to another replica instead of waiting for this one's grace period.
	Stopping <-chan struct{}
}

var _ pb.ExternalScalerServer = (*Server)(nil)

func refOf(ref *pb.ScaledObjectRef) (namespace, name string, md map[string]string, err error) {
	if ref == nil || ref.GetName() == "" || ref.GetNamespace() == "" {
		return "", "", nil, status.Error(codes.InvalidArgument, "ScaledObjectRef needs name and namespace")
	}
	return ref.GetNamespace(), ref.GetName(), ref.GetScalerMetadata(), nil
}

// toStatus maps an evaluation error to the gRPC status KEDA sees.
func toStatus(err error) error {
	var ik *scaler.InvalidKeyError
	switch {
	case errors.As(err, &ik):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, targets.ErrTarget):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// IsActive reports whether requests wait above the activation threshold, requests run, or
// replicas are starting. With no fresh data it fails: KEDA keeps the ScaledObject as it is.
func (s *Server) IsActive(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	ns, name, md, err := refOf(ref)
	if err != nil {
		return nil, err
	}
	ev, err := s.Engine.EvaluateActivity(ctx, ns, name, md)
	if err != nil {
		return nil, toStatus(err)
	}
	seatsWhenIdle(ctx, s.Engine, ns, name, ev)
	return &pb.IsActiveResponse{Result: ev.Decision.Active}, nil
}

// StreamIsActive sends the activity at once and then whenever it changes, re-evaluating every
// StreamInterval, so a queue appearing activates a ScaledObject without waiting for KEDA's
// next poll. Failed evaluations send nothing (the last value stands); invalid metadata ends
// the stream with InvalidArgument.
func (s *Server) StreamIsActive(ref *pb.ScaledObjectRef, stream grpc.ServerStreamingServer[pb.IsActiveResponse]) error {
	ns, name, md, err := refOf(ref)
	if err != nil {
		return err
	}
	if _, err := scaler.ParseTrigger(md); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	interval := s.StreamInterval
	if interval <= 0 {
		interval = time.Second
	}
	ticker := clk.NewTicker(interval)
	defer ticker.Stop()
	ctx := stream.Context()
	var last *bool
	for {
		ev, err := s.Engine.EvaluateActivity(ctx, ns, name, md)
		if err == nil {
			seatsWhenIdle(ctx, s.Engine, ns, name, ev)
		}
		if err == nil && (last == nil || *last != ev.Decision.Active) {
			if err := stream.Send(&pb.IsActiveResponse{Result: ev.Decision.Active}); err != nil {
				return err
			}
			a := ev.Decision.Active
			last = &a
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.Stopping:
			return status.Error(codes.Unavailable, "scaler shutting down; reconnect")
		case <-ticker.C():
		}
	}
}

// seatsWhenIdle sets the warm seats an inactive ScaledObject asks for. While it is active the
// HPA's GetMetrics sets them (the answer that sets the replicas sets the seats); an inactive one
// KEDA has scaled to zero, where nothing calls GetMetrics — without this its last want went
// stale and its seats held their nodes for as long as the ScaledObject lived.
func seatsWhenIdle(ctx context.Context, e *Engine, ns, name string, ev Evaluation) {
	if !ev.Decision.Active {
		e.WantSeats(ctx, ns, name, ev)
	}
}

// GetMetricSpec returns one metric per signal the trigger scales on, with its per-replica
// target (KEDA makes each an AverageValue target of the HPA).
func (s *Server) GetMetricSpec(_ context.Context, ref *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	_, _, md, err := refOf(ref)
	if err != nil {
		return nil, err
	}
	t, err := scaler.ParseTrigger(md)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	out := &pb.GetMetricSpecResponse{}
	for _, sig := range t.Signals() {
		target := t.Target(sig)
		out.MetricSpecs = append(out.MetricSpecs, &pb.MetricSpec{
			MetricName:      sig.MetricName(),
			TargetSize:      int64(max(1, target)),
			TargetSizeFloat: scaler.WireTarget(target),
		})
	}
	return out, nil
}

// GetMetrics returns the named metric's value: the signal's demand expressed so the HPA's
// AverageValue math lands on the replicas berth decided (docs/scaler.md).
func (s *Server) GetMetrics(ctx context.Context, req *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	ns, name, md, err := refOf(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	sig, ok := scaler.SignalForMetric(req.GetMetricName())
	if !ok {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("unknown metric %q; berth serves %s", req.GetMetricName(), metricNames()))
	}
	ev, err := s.Engine.Evaluate(ctx, ns, name, md)
	if err != nil {
		return nil, toStatus(err)
	}
	s.Engine.WantSeats(ctx, ns, name, ev) // the answer that sets the replicas sets the seats
	sd, ok := ev.Decision.Signal(sig)
	if !ok {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("metric %q is not one this trigger scales on (role %s, targets set: %v)", req.GetMetricName(), ev.Trigger.Role, ev.Trigger.Signals()))
	}
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{
		MetricName:       sig.MetricName(),
		MetricValue:      int64(sd.Value + 0.5),
		MetricValueFloat: sd.Value,
	}}}, nil
}

func metricNames() string {
	var out []string
	for _, s := range scaler.AllSignals() {
		out = append(out, s.MetricName())
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
