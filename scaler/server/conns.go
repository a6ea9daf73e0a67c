package server

import (
	"context"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc/stats"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-dev/berth/scaler/warmseats"
)

// conns names each gRPC connection the scaler accepts and tells the warm seat keeper when one
// ends: a want is the connection's that asked for it (Engine.WantSeats), and when KEDA's
// operator moves to another scaler replica its old connection ends here
// (warmseats.Wants.Disconnected).
type conns struct {
	next  atomic.Uint64
	wants *warmseats.Wants
	clock clock.PassiveClock
}

// connKey is the context key of a connection's name.
type connKey struct{}

// connFrom is the name of the connection a call's ctx came over ("" when unknown).
func connFrom(ctx context.Context) string {
	id, _ := ctx.Value(connKey{}).(string)
	return id
}

// TagConn names the connection: its peer and a number of this process's own (a peer's
// address may come again on a new connection).
func (c *conns) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	peer := ""
	if info != nil && info.RemoteAddr != nil {
		peer = info.RemoteAddr.String()
	}
	return context.WithValue(ctx, connKey{}, peer+"#"+strconv.FormatUint(c.next.Add(1), 10))
}

// HandleConn forgets the wants of a connection that ended.
func (c *conns) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ended := s.(*stats.ConnEnd); !ended {
		return
	}
	if gone := c.wants.Disconnected(connFrom(ctx), c.clock.Now()); len(gone) > 0 {
		log.Log.WithName("warm-seats").Info("KEDA's connection ended: leaving the warm seats of its ScaledObjects alone until KEDA asks this replica again",
			"connection", connFrom(ctx), "scaledObjects", len(gone))
	}
}

// TagRPC keeps the connection's context.
func (c *conns) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC does nothing: calls are measured by the interceptor.
func (c *conns) HandleRPC(context.Context, stats.RPCStats) {}
