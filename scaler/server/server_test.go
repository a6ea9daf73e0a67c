package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/google/go-cmp/cmp"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-dev/berth/internal/certs"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/scaler/targets"
	"github.com/berth-dev/berth/test/scalertest"
)

// staticResolver stands in for the API: a fixed pod list per ScaledObject.
type staticResolver struct {
	pods []scaler.Pod
	err  error
	// spec is the target's spec.replicas, when hasSpec.
	spec    int
	hasSpec bool
}

func (r *staticResolver) Resolve(context.Context, string, string, *scaler.Trigger) (targets.Info, error) {
	info := targets.Info{Selector: labels.Everything(), MaxReplicas: 10}
	if r.hasSpec {
		info.Target = &targets.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama"}
	}
	return info, r.err
}

func (r *staticResolver) List(context.Context, string, labels.Selector) ([]scaler.Pod, error) {
	return r.pods, nil
}

func (r *staticResolver) Replicas(context.Context, string, targets.Info) (int, bool, error) {
	return r.spec, r.hasSpec, nil
}

type harness struct {
	reps   []*scalertest.Replica
	port   int
	res    *staticResolver
	client pb.ExternalScalerClient
	conn   *grpc.ClientConn
}

// start serves berth's scaler in-process on 127.0.0.1:0 over n fake replicas.
func start(t *testing.T, n int, tlsCfg *tls.Config, dial ...grpc.DialOption) *harness {
	t.Helper()
	return startWith(t, n, pods.Options{Timeout: 300 * time.Millisecond, FreshFor: time.Millisecond}, tlsCfg, dial...)
}

// startWith is start with the pods source's options given.
func startWith(t *testing.T, n int, po pods.Options, tlsCfg *tls.Config, dial ...grpc.DialOption) *harness {
	t.Helper()
	return startEngine(t, n, po, func(*Engine) {}, tlsCfg, dial...)
}

// startEngine is startWith with the engine set up by setup before it serves.
func startEngine(t *testing.T, n int, po pods.Options, setup func(*Engine), tlsCfg *tls.Config, dial ...grpc.DialOption) *harness {
	t.Helper()
	reps, port, podList := scalertest.Fleet(t, n)
	res := &staticResolver{pods: podList}
	eng := &Engine{Resolver: res, Pods: pods.New(po),
		Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy}
	setup(eng)
	gs, hs := NewGRPCServer(&Server{Engine: eng, StreamInterval: 20 * time.Millisecond}, tlsCfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, gs, hs, lis, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &harness{reps: reps, port: port, res: res, client: pb.NewExternalScalerClient(conn), conn: conn}
}

// ref is what KEDA sends: the ScaledObject's name, namespace and the trigger metadata as
// written (including KEDA's own scalerAddress key).
func (h *harness) ref(md map[string]string) *pb.ScaledObjectRef {
	m := map[string]string{"scalerAddress": "berth-scaler.berth:9090", "metricsPort": strconv.Itoa(h.port)}
	for k, v := range md {
		m[k] = v
	}
	return &pb.ScaledObjectRef{Name: "llama", Namespace: "inference", ScalerMetadata: m}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestGetMetricSpec(t *testing.T) {
	h := start(t, 1, nil)
	resp, err := h.client.GetMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4", "targetKVCacheUsage": "0.75", "targetTTFTSeconds": "0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	gotInt := map[string]int64{}
	for _, s := range resp.MetricSpecs {
		got[s.MetricName] = s.TargetSizeFloat
		gotInt[s.MetricName] = s.TargetSize
	}
	// The deprecated int field stays usable: the target rounded down, at least 1.
	if d := cmp.Diff(map[string]int64{"berth-queue-depth": 4, "berth-kv-cache-usage": 1, "berth-ttft-seconds": 1}, gotInt); d != "" {
		t.Errorf("TargetSize (-want +got):\n%s", d)
	}
	// Each target plus a quarter milli (scaler.WireTarget): KEDA's conversion lands on the
	// target's milli count whether it rounds or truncates.
	want := map[string]float64{"berth-queue-depth": 4.00025, "berth-kv-cache-usage": 0.75025, "berth-ttft-seconds": 0.50025}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("TargetSizeFloat (-want +got):\n%s", d)
	}
	// Role decode adds its KV saturation guard by default.
	resp, err = h.client.GetMetricSpec(ctx(t), h.ref(map[string]string{"targetKVCacheUsage": "0.8", "role": "decode"}))
	if err != nil || len(resp.MetricSpecs) != 2 || resp.MetricSpecs[0].MetricName != "berth-kv-cache-usage" || resp.MetricSpecs[1].MetricName != "berth-kv-saturation" {
		t.Fatalf("decode specs = %v, %v", resp, err)
	}
}

func TestBadMetadataIsInvalidArgument(t *testing.T) {
	h := start(t, 1, nil)
	bad := []struct {
		md   map[string]string
		want string
	}{
		{map[string]string{}, "targetQueueDepth"},
		{map[string]string{"targetQueueDepth": "lots"}, `"targetQueueDepth"="lots"`},
		{map[string]string{"targetQueueDepth": "4", "source": "dcgm"}, "want one of pods, prometheus"},
		{map[string]string{"targetQueueDepth": "4", "podselector": "app=x"}, `"podselector": unknown key`},
	}
	for _, b := range bad {
		ref := h.ref(b.md)
		calls := map[string]error{}
		_, calls["GetMetricSpec"] = h.client.GetMetricSpec(ctx(t), ref)
		_, calls["GetMetrics"] = h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "berth-queue-depth"})
		_, calls["IsActive"] = h.client.IsActive(ctx(t), ref)
		stream, err := h.client.StreamIsActive(ctx(t), ref)
		if err == nil {
			_, err = stream.Recv()
		}
		calls["StreamIsActive"] = err
		for rpc, err := range calls {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s(%v) = %v, want InvalidArgument naming %s", rpc, b.md, err, b.want)
			}
		}
	}
	if _, err := h.client.IsActive(ctx(t), &pb.ScaledObjectRef{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty ref: %v", err)
	}
	_, err := h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: h.ref(map[string]string{"targetQueueDepth": "4"}), MetricName: "gpu-util"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "berth-queue-depth") {
		t.Errorf("unknown metric: %v", err)
	}
	_, err = h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: h.ref(map[string]string{"targetQueueDepth": "4"}), MetricName: "berth-kv-cache-usage"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("metric the trigger does not scale on: %v", err)
	}
}

func TestGetMetricsAndIsActive(t *testing.T) {
	h := start(t, 3, nil)
	h.reps[0].Set(scalertest.Page(10, 8, 0.9))
	h.reps[1].Set(scalertest.Page(7, 8, 0.7))
	h.reps[2].Set(scalertest.Page(0, 8, 0.8))
	md := map[string]string{"targetQueueDepth": "4", "targetKVCacheUsage": "0.8"}
	values := map[string]float64{}
	for _, name := range []string{"berth-queue-depth", "berth-kv-cache-usage"} {
		resp, err := h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: h.ref(md), MetricName: name})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.MetricValues) != 1 || resp.MetricValues[0].MetricName != name {
			t.Fatalf("%s: %v", name, resp)
		}
		values[name] = resp.MetricValues[0].MetricValueFloat
	}
	// 17 waiting at 4 per replica: 5 replicas; KV 2.4 at 0.8: 3. The HPA takes 5.
	if r := hpa(values["berth-queue-depth"], 4); r != 5 {
		t.Errorf("queue: value %v → HPA %d replicas, want 5", values["berth-queue-depth"], r)
	}
	if r := hpa(values["berth-kv-cache-usage"], 0.8); r != 3 {
		t.Errorf("kv: value %v → HPA %d replicas, want 3", values["berth-kv-cache-usage"], r)
	}
	act, err := h.client.IsActive(ctx(t), h.ref(md))
	if err != nil || !act.Result {
		t.Fatalf("IsActive = %v, %v", act, err)
	}
	for _, r := range h.reps {
		r.Set(scalertest.Page(0, 0, 0))
	}
	time.Sleep(5 * time.Millisecond) // past FreshFor
	act, err = h.client.IsActive(ctx(t), h.ref(md))
	if err != nil || act.Result {
		t.Fatalf("idle IsActive = %v, %v", act, err)
	}
}

func hpa(value, target float64) int {
	v, tg := int64(value*1000), int64(target*1000)
	return int((v + tg - 1) / tg)
}

// TestFaultsNeverLookIdle: with every replica failing and no sample ever taken, each RPC
// errors (so KEDA's fallback and last activity stand) instead of answering zero or inactive.
func TestFaultsNeverLookIdle(t *testing.T) {
	h := start(t, 2, nil)
	for _, r := range h.reps {
		r.Set(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	}
	md := h.ref(map[string]string{"targetQueueDepth": "4"})
	_, err := h.client.GetMetrics(ctx(t), &pb.GetMetricsRequest{ScaledObjectRef: md, MetricName: "berth-queue-depth"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no fresh sample") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("GetMetrics with all replicas failing = %v, want Unavailable naming the cause", err)
	}
	if _, err := h.client.IsActive(ctx(t), md); status.Code(err) != codes.Unavailable {
		t.Fatalf("IsActive with all replicas failing = %v, want Unavailable", err)
	}
	h.res.err = targets.ErrTarget
	if _, err := h.client.IsActive(ctx(t), md); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unresolvable target = %v, want FailedPrecondition", err)
	}
}

// TestStreamIsActivePushesChanges: the stream sends the activity when it changes, and only
// then: a replica that fails sends nothing (neither while its last page still counts nor once
// it is too old to), a recovery to the same activity sends nothing, and a drained queue sends
// exactly one "inactive".
func TestStreamIsActivePushesChanges(t *testing.T) {
	const maxAge, interval = 100 * time.Millisecond, 20 * time.Millisecond
	h := startWith(t, 1, pods.Options{Timeout: 300 * time.Millisecond, FreshFor: time.Millisecond, MaxAge: maxAge}, nil)
	stream, err := h.client.StreamIsActive(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *pb.IsActiveResponse, 16)
	go func() {
		defer close(msgs)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	recv := func(what string) bool {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			return m.Result
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing sent in 5s", what)
		}
		return false
	}
	// quiet fails on any message while the replica serves hits more scrapes, and for at least
	// d: the stream evaluates every interval.
	quiet := func(what string, hits int, d time.Duration) {
		t.Helper()
		base, start := h.reps[0].Hits(), time.Now()
		for h.reps[0].Hits() < base+hits || time.Since(start) < d {
			select {
			case m := <-msgs:
				t.Fatalf("%s: stream sent %v", what, m)
			case <-time.After(interval):
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: only %d scrapes in 5s", what, h.reps[0].Hits()-base)
			}
		}
	}
	if recv("first message") {
		t.Fatal("first message active, want inactive at once")
	}
	h.reps[0].Set(scalertest.Page(3, 0, 0)) // a queue appears
	if !recv("after a queue appears") {
		t.Fatal("want active pushed")
	}
	h.reps[0].Set(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	quiet("while the replica fails (its last page counts, then is too old)", 5, maxAge+3*interval)
	h.reps[0].Set(scalertest.Page(3, 0, 0))
	quiet("after recovering to the same activity", 3, 3*interval)
	h.reps[0].Set(scalertest.Page(0, 0, 0))
	if recv("after the queue drains") {
		t.Fatal("want inactive pushed")
	}
	quiet("after the one change", 3, 3*interval)
}

// TestStreamMetricSpecUnimplemented: berth's targets change only with the ScaledObject, so it
// answers Unimplemented, on which KEDA silently keeps using GetMetricSpec.
func TestStreamMetricSpecUnimplemented(t *testing.T) {
	h := start(t, 1, nil)
	stream, err := h.client.StreamMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"}))
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("StreamMetricSpec = %v, want Unimplemented", err)
	}
}

func TestHealth(t *testing.T) {
	h := start(t, 1, nil)
	resp, err := healthpb.NewHealthClient(h.conn).Check(ctx(t), &healthpb.HealthCheckRequest{Service: "externalscaler.ExternalScaler"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
}

type pkiFiles struct {
	dir                              string
	ca                               *certs.KeyPair
	serverCert, serverKey, caFile    string
	clientCert, clientKey, foreignCA string
}

func writePKI(t *testing.T) pkiFiles {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.Issue(certs.CA("berth-scaler-ca", now.Add(-time.Hour), now.Add(time.Hour)), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := certs.Issue(certs.Serving("berth-scaler", []string{"127.0.0.1", "localhost"}, now.Add(-time.Hour), now.Add(time.Hour)), ca)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := certs.Issue(certs.Client("keda-operator", now.Add(time.Hour)), ca)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Issue(certs.CA("someone-else", now.Add(-time.Hour), now.Add(time.Hour)), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := pkiFiles{dir: dir, ca: ca}
	for _, w := range []struct {
		dst  *string
		name string
		data []byte
	}{{&f.serverCert, "tls.crt", srv.CertPEM}, {&f.serverKey, "tls.key", srv.KeyPEM}, {&f.caFile, "ca.crt", ca.CertPEM},
		{&f.clientCert, "client.crt", cl.CertPEM}, {&f.clientKey, "client.key", cl.KeyPEM}, {&f.foreignCA, "other.crt", other.CertPEM}} {
		*w.dst = filepath.Join(dir, w.name)
		if err := os.WriteFile(*w.dst, w.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// kedaTLS is the client side as KEDA builds it from enableTLS and the TriggerAuthentication's
// caCert / tlsClientCert / tlsClientKey.
func kedaTLS(t *testing.T, caFile, certFile, keyFile string) grpc.DialOption {
	t.Helper()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA: %v", err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

func TestTLS(t *testing.T) {
	f := writePKI(t)
	cfg, err := certs.ServingFiles{CertFile: f.serverCert, KeyFile: f.serverKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, 1, cfg, kedaTLS(t, f.caFile, "", ""))
	if _, err := h.client.GetMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"})); err != nil {
		t.Fatalf("TLS call: %v", err)
	}
	plain, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := pb.NewExternalScalerClient(plain).GetMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"})); err == nil {
		t.Fatal("a plaintext client got through a TLS server")
	}
}

func TestMutualTLS(t *testing.T) {
	f := writePKI(t)
	cfg, err := certs.ServingFiles{CertFile: f.serverCert, KeyFile: f.serverKey, ClientCAFile: f.caFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, 1, cfg, kedaTLS(t, f.caFile, f.clientCert, f.clientKey))
	if _, err := h.client.GetMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"})); err != nil {
		t.Fatalf("mTLS call with KEDA's client certificate: %v", err)
	}
	noCert, err := grpc.NewClient(h.conn.Target(), kedaTLS(t, f.caFile, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := pb.NewExternalScalerClient(noCert).GetMetricSpec(ctx(t), h.ref(map[string]string{"targetQueueDepth": "4"})); err == nil {
		t.Fatal("a client without a certificate got through mutual TLS")
	}
	if _, err := (certs.ServingFiles{CertFile: f.serverCert, KeyFile: f.serverKey, ClientCAFile: f.serverKey}).Config(); err == nil {
		t.Fatal("a client CA file without a certificate was accepted")
	}
}

func TestGracefulShutdown(t *testing.T) {
	eng := &Engine{Resolver: &staticResolver{}, Pods: pods.New(pods.Options{}), Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy}
	c, cancel := context.WithCancel(context.Background())
	gs, hs := NewGRPCServer(&Server{Engine: eng, Stopping: c.Done()}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(c, gs, hs, lis, 30*time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewExternalScalerClient(conn).StreamIsActive(ctx(t), &pb.ScaledObjectRef{Name: "a", Namespace: "b", ScalerMetadata: map[string]string{"targetQueueDepth": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return well within its 30 s grace: open streams must end at once on shutdown")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after shutdown: %v, want Unavailable (KEDA reconnects)", err)
	}
}
