package scaler

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Source names where a ScaledObject's signals come from.
type Source string

const (
	// SourcePods scrapes every ready replica's metrics endpoint directly (default).
	SourcePods Source = "pods"
	// SourcePrometheus runs instant queries against a Prometheus server.
	SourcePrometheus Source = "prometheus"
)

// Role is the part a vLLM Deployment plays in disaggregated serving, which decides the
// signals it scales on.
type Role string

const (
	// RoleBoth scales on every configured signal (default; a classic vLLM server).
	RoleBoth Role = "both"
	// RolePrefill scales on the queue and time to first token; with no sizing target of its
	// own it sizes on queued prompt tokens (DefaultPrefillQueuedPromptTokens per replica).
	RolePrefill Role = "prefill"
	// RoleDecode scales on the KV cache and the requests in flight; with no KV target of its
	// own it sizes on KV-cache usage (DefaultDecodeKVCacheUsage), and it guards against full
	// caches (DefaultKVSaturation) unless kvSaturation says otherwise.
	RoleDecode Role = "decode"
)

// Role defaults, filled in where a trigger leaves them out.
const (
	// DefaultPrefillQueuedPromptTokens is role prefill's targetQueuedPromptTokens: about one
	// prefill step queued per replica at vLLM V1's larger default token budget
	// (max_num_batched_tokens 8192), so a request waits about one step before its prefill
	// starts.
	DefaultPrefillQueuedPromptTokens = 8192
	// DefaultDecodeKVCacheUsage is role decode's targetKVCacheUsage: caches 80% full on
	// average, room for the running sequences to grow before vLLM preempts.
	DefaultDecodeKVCacheUsage = 0.8
	// DefaultKVSaturation is role decode's kvSaturation: above 95% mean KV usage the caches are
	// about to run out and replicas are added whatever the sizing signals say.
	DefaultKVSaturation = 0.95
)

// Trigger metadata keys, as written under a ScaledObject's external trigger.
const (
	KeyPodSelector          = "podSelector"
	KeyMetricsPort          = "metricsPort"
	KeyMetricsPath          = "metricsPath"
	KeyModel                = "model"
	KeyTTFTSLOSeconds       = "ttftSLOSeconds"
	KeyITLSLOSeconds        = "itlSLOSeconds"
	KeySLOAttainment        = "sloAttainment"
	KeyColdStartSeconds     = "coldStartSeconds"
	KeyHeadroomQuantile     = "headroomQuantile"
	KeyMaxHeadroom          = "maxHeadroom"
	KeyWarmSeats            = "warmSeats"
	KeyMinWarmSeats         = "minWarmSeats"
	KeyTargetQueueDepth     = "targetQueueDepth"
	KeyTargetConcurrency    = "targetConcurrency"
	KeyTargetKVCacheUsage   = "targetKVCacheUsage"
	KeyTargetKVTokens       = "targetKVTokens"
	KeyTargetQueuedPrompt   = "targetQueuedPromptTokens"
	KeyKVSaturation         = "kvSaturation"
	KeyTargetTTFTSeconds    = "targetTTFTSeconds"
	KeyTargetITLSeconds     = "targetITLSeconds"
	KeyMaxPreemptions       = "maxPreemptionsPerMinute"
	KeyTargetTokens         = "targetTokensPerSecond"
	KeyFollow               = "followScaledObject"
	KeyFollowRatio          = "followRatio"
	KeyActivationQueueDepth = "activationQueueDepth"
	KeyStartupTimeout       = "startupTimeoutSeconds"
	KeyDemandQuery          = "demandQuery"
	KeyDemandPreset         = "demandPreset"
	KeyInferencePool        = "inferencePool"
	KeySource               = "source"
	KeyRole                 = "role"
	KeyPrometheusAddress    = "prometheusAddress"
	KeyPrometheusPodLabel   = "prometheusPodLabel"
	KeyPrometheusNSLabel    = "prometheusNamespaceLabel"
	KeyPrometheusUnsafeSSL  = "prometheusUnsafeSsl"
	// KeyPrometheusBearerTokenFromEnv carries a bearer token. KEDA resolves keys ending in
	// FromEnv from the scale target's container environment before it calls the scaler, so the
	// value berth receives is the token itself (KEDA does not pass TriggerAuthentication
	// parameters to external scalers).
	KeyPrometheusBearerTokenFromEnv = "prometheusBearerTokenFromEnv"
	// KeyPrometheusUsernameFromEnv and KeyPrometheusPasswordFromEnv carry basic-auth
	// credentials, resolved by KEDA like KeyPrometheusBearerTokenFromEnv.
	KeyPrometheusUsernameFromEnv = "prometheusUsernameFromEnv"
	KeyPrometheusPasswordFromEnv = "prometheusPasswordFromEnv"
	// KeyPrometheusAWSRegion makes the source sign its requests with AWS SigV4 for that region
	// (Amazon Managed Service for Prometheus), with the scaler's own AWS credentials: IRSA or
	// EKS Pod Identity on its ServiceAccount, or the default chain.
	KeyPrometheusAWSRegion = "prometheusAwsRegion"
)

// kedaKeys are trigger keys KEDA itself reads and forwards to the scaler; they are accepted
// and ignored.
var kedaKeys = map[string]bool{"scalerAddress": true, "enableTLS": true, "unsafeSsl": true}

// PrometheusConfig is how the prometheus source reaches its server.
type PrometheusConfig struct {
	// Address is the server's base URL, e.g. http://prometheus.monitoring:9090.
	Address string
	// PodLabel and NamespaceLabel are the series labels that name a replica's pod and
	// namespace (default pod and namespace, as Prometheus Operator's PodMonitor writes them).
	PodLabel, NamespaceLabel string
	// BearerToken, Username and Password authenticate to the server when set.
	BearerToken, Username, Password string
	// InsecureSkipVerify skips TLS verification of the server.
	InsecureSkipVerify bool
	// AWSRegion, when set, signs every request with AWS SigV4 for the "aps" service of this
	// region (Amazon Managed Service for Prometheus).
	AWSRegion string
}

// Trigger is the parsed, validated metadata of one ScaledObject trigger.
type Trigger struct {
	// PodSelector selects the replicas; nil means the scale target's own selector.
	PodSelector labels.Selector
	// MetricsPort and MetricsPath locate each replica's metrics endpoint.
	MetricsPort int
	MetricsPath string
	// Model, when set, counts only series whose model_name is this.
	Model string
	// SLO is the objective SignalSLO sizes the fleet to meet (SLO.TTFT 0: not used).
	SLO SLO
	// WarmSeats is the most of the SLO signal's burst headroom held as warm seats (seat pods
	// with the fleet's requests and serving image on nodes of their own) instead of serving
	// replicas; MinWarmSeats the fewest held whatever the headroom. 0: none.
	WarmSeats, MinWarmSeats int
	// TargetQueueDepth is the waiting requests one replica should hold (0: queue not used).
	TargetQueueDepth float64
	// TargetConcurrency is the requests, running plus waiting, one replica should hold (0: not
	// used).
	TargetConcurrency float64
	// TargetKVCacheUsage is the KV-cache usage, 0–1, one replica should run at (0: not used).
	TargetKVCacheUsage float64
	// TargetKVTokens is the KV-cache tokens one replica should hold in use (0: not used).
	TargetKVTokens float64
	// TargetQueuedPromptTokens is the prompt tokens waiting for prefill one replica should
	// hold (0: not used).
	TargetQueuedPromptTokens float64
	// KVSaturation is the mean KV-cache usage, 0–1, above which replicas are added whatever
	// the sizing signals ask (0: no guard).
	KVSaturation float64
	// TargetTokens is the prompt plus generated tokens per second one replica should process
	// (0: not used).
	TargetTokens float64
	// TargetTTFT is the p95 time to first token in seconds to hold (0: not used).
	TargetTTFT float64
	// TargetITL is the p95 inter-token latency in seconds to hold (0: not used).
	TargetITL float64
	// MaxPreemptions is the preemptions per minute per replica above which replicas are added
	// (0: not used).
	MaxPreemptions float64
	// Follow names a ScaledObject in the same namespace whose own replica count, times
	// FollowRatio, is a floor of this one's ("" for none): a prefill fleet that keeps a ratio
	// to its decode fleet.
	Follow      string
	FollowRatio float64
	// ActivationQueueDepth: the ScaledObject is active when more requests than this wait.
	ActivationQueueDepth float64
	// StartupTimeout is how long a replica that is not ready holds a scale-up as capacity on
	// its way (DefaultStartupTimeout unless startupTimeoutSeconds is set).
	StartupTimeout time.Duration
	// DemandQuery, when set, is a PromQL query for requests waiting in front of the replicas (at
	// a router, gateway or endpoint picker) — demand that exists with no replica at all, so a
	// fleet can scale from zero. It needs prometheusAddress.
	DemandQuery string
	// Source is where the signals come from.
	Source Source
	// Role decides which signals count.
	Role Role
	// Prometheus configures SourcePrometheus.
	Prometheus PrometheusConfig
}

// InvalidKeyError is a metadata key with a value berth cannot use. The gRPC server turns it
// into InvalidArgument.
type InvalidKeyError struct {
	Key, Value, Want string
}

// Error names the key, the value and what berth accepts.
func (e *InvalidKeyError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("trigger metadata %q: %s", e.Key, e.Want)
	}
	return fmt.Sprintf("trigger metadata %q=%q: %s", e.Key, e.Value, e.Want)
}

// ParseTrigger reads and validates a trigger's metadata. Every problem names the key and the
// values it accepts.
func ParseTrigger(md map[string]string) (*Trigger, error) {
	p := parser{md: md}
	t := &Trigger{
		MetricsPort: 8000,
		MetricsPath: "/metrics",
		Source:      SourcePods,
		Role:        RoleBoth,
		Prometheus:  PrometheusConfig{PodLabel: "pod", NamespaceLabel: "namespace"},

		StartupTimeout: DefaultStartupTimeout,
	}
	if err := p.unknownKeys(); err != nil {
		return nil, err
	}
	if err := p.endpoint(t); err != nil {
		return nil, err
	}
	t.Model, _ = p.get(KeyModel)
	t.DemandQuery, _ = p.get(KeyDemandQuery)
	if err := p.demandPreset(t); err != nil {
		return nil, err
	}
	if err := p.targets(t); err != nil {
		return nil, err
	}
	if err := p.slo(t); err != nil {
		return nil, err
	}
	if err := p.follow(t); err != nil {
		return nil, err
	}
	if v, ok := p.get(KeyActivationQueueDepth); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &InvalidKeyError{KeyActivationQueueDepth, v, "want a number >= 0 (waiting requests above which the ScaledObject is active)"}
		}
		t.ActivationQueueDepth = f
	}
	if v, ok := p.get(KeyStartupTimeout); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 86400 {
			return nil, &InvalidKeyError{KeyStartupTimeout, v, "want whole seconds from 1 to 86400 that a replica may take to become ready before it no longer holds a scale-up (default 600)"}
		}
		t.StartupTimeout = time.Duration(n) * time.Second
	}
	if v, ok := p.get(KeyRole); ok {
		switch Role(v) {
		case RoleBoth, RolePrefill, RoleDecode:
			t.Role = Role(v)
		default:
			return nil, &InvalidKeyError{KeyRole, v, "want one of prefill, decode, both"}
		}
	}
	if err := t.checkRoleTargets(p); err != nil {
		return nil, err
	}
	if t.DemandQuery != "" && t.TargetQueueDepth == 0 && t.TargetConcurrency == 0 {
		return nil, &InvalidKeyError{KeyDemandQuery, "", "counts requests waiting in front of the replicas, which size the fleet through targetQueueDepth or targetConcurrency; set one of them"}
	}
	if v, ok := p.get(KeySource); ok {
		switch Source(v) {
		case SourcePods, SourcePrometheus:
			t.Source = Source(v)
		default:
			return nil, &InvalidKeyError{KeySource, v, "want one of pods, prometheus"}
		}
	}
	if t.SLO.TTFT > 0 && t.Source == SourcePrometheus {
		return nil, &InvalidKeyError{KeyTTFTSLOSeconds, "", "sizes the fleet from each replica's own window (finished requests, first tokens), which source pods reads; remove source prometheus or size on targetQueueDepth or targetConcurrency"}
	}
	return t, p.prometheus(t)
}

// endpoint reads where the replicas are and serve their metrics.
func (p parser) endpoint(t *Trigger) error {
	if v, ok := p.get(KeyPodSelector); ok {
		sel, err := labels.Parse(v)
		if err != nil || sel.Empty() {
			return &InvalidKeyError{KeyPodSelector, v, "want a non-empty label selector, e.g. app=vllm,model=llama"}
		}
		t.PodSelector = sel
	}
	if v, ok := p.get(KeyMetricsPort); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return &InvalidKeyError{KeyMetricsPort, v, "want a port number 1-65535"}
		}
		t.MetricsPort = n
	}
	if v, ok := p.get(KeyMetricsPath); ok {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?# ") {
			return &InvalidKeyError{KeyMetricsPath, v, "want an absolute URL path such as /metrics"}
		}
		t.MetricsPath = v
	}
	return nil
}

// targets reads every per-replica target and SLO.
func (p parser) targets(t *Trigger) error {
	for _, tg := range []struct {
		key, what string
		max       float64
		dst       *float64
	}{
		{KeyTargetQueueDepth, "waiting requests per replica", math.Inf(1), &t.TargetQueueDepth},
		{KeyTargetConcurrency, "requests running plus waiting per replica", math.Inf(1), &t.TargetConcurrency},
		{KeyTargetKVCacheUsage, "KV-cache usage per replica", 1, &t.TargetKVCacheUsage},
		{KeyTargetKVTokens, "KV-cache tokens in use per replica", math.Inf(1), &t.TargetKVTokens},
		{KeyTargetQueuedPrompt, "prompt tokens waiting per replica", math.Inf(1), &t.TargetQueuedPromptTokens},
		{KeyKVSaturation, "mean KV-cache usage above which replicas are added; 1 turns the guard off", 1, &t.KVSaturation},
		{KeyTargetTokens, "prompt plus generated tokens per second per replica", math.Inf(1), &t.TargetTokens},
		{KeyTargetTTFTSeconds, "p95 time to first token in seconds", math.Inf(1), &t.TargetTTFT},
		{KeyTargetITLSeconds, "p95 inter-token latency in seconds", math.Inf(1), &t.TargetITL},
		{KeyMaxPreemptions, "preemptions per minute per replica", math.Inf(1), &t.MaxPreemptions},
	} {
		v, err := p.target(tg.key, tg.what, tg.max)
		if err != nil {
			return err
		}
		*tg.dst = v
	}
	return nil
}

// checkRoleTargets fills in a role's defaults, requires the targets a role scales on and
// refuses those it ignores, so a ScaledObject never silently scales on less than its author
// meant.
func (t *Trigger) checkRoleTargets(p parser) (err error) {
	switch t.Role {
	case RolePrefill:
		for _, k := range []struct {
			key string
			set bool
		}{{KeyTargetKVCacheUsage, t.TargetKVCacheUsage > 0}, {KeyTargetKVTokens, t.TargetKVTokens > 0}, {KeyKVSaturation, t.KVSaturation > 0 && t.KVSaturation < 1}} {
			if k.set {
				return &InvalidKeyError{k.key, "", "not used by role prefill (a prefill instance hands its KV cache to decode; prefill scales on targetQueuedPromptTokens, targetQueueDepth, targetConcurrency or targetTokensPerSecond, with targetTTFTSeconds as its SLO); remove it or use role decode or both"}
			}
		}
		if t.TargetITL > 0 {
			return &InvalidKeyError{KeyTargetITLSeconds, "", "not used by role prefill (a prefill instance generates no tokens after the first); put it on the decode ScaledObject"}
		}
		if t.SLO.ITL > 0 {
			return &InvalidKeyError{KeyITLSLOSeconds, "", "not used by role prefill (a prefill instance generates no tokens after the first); put the ITL objective on the decode ScaledObject"}
		}
		if t.TargetQueueDepth == 0 && t.TargetConcurrency == 0 && t.TargetTokens == 0 && t.TargetQueuedPromptTokens == 0 {
			t.TargetQueuedPromptTokens = DefaultPrefillQueuedPromptTokens
		}
	case RoleDecode:
		defer func() {
			if err == nil {
				err = t.checkKVSaturation(p)
			}
		}()
		if t.SLO.TTFT > 0 {
			return &InvalidKeyError{KeyTTFTSLOSeconds, "", "not used by role decode (a decode instance's first token is the prefill fleet's); size the prefill ScaledObject (role prefill or both) on the SLO"}
		}
		if t.TargetQueueDepth > 0 || t.TargetTTFT > 0 || t.TargetQueuedPromptTokens > 0 {
			return &InvalidKeyError{KeyRole, "decode", "decode scales on the KV cache (targetKVCacheUsage, targetKVTokens) and targetConcurrency, with targetITLSeconds as its SLO; remove targetQueueDepth, targetQueuedPromptTokens and targetTTFTSeconds or use role prefill or both"}
		}
		if t.TargetKVCacheUsage == 0 && t.TargetKVTokens == 0 {
			t.TargetKVCacheUsage = DefaultDecodeKVCacheUsage
		}
		if _, set := p.get(KeyKVSaturation); !set {
			t.KVSaturation = DefaultKVSaturation
		}
	default:
		if err := t.checkKVSaturation(p); err != nil {
			return err
		}
		if t.TargetQueueDepth == 0 && t.TargetConcurrency == 0 && t.TargetKVCacheUsage == 0 && t.TargetTokens == 0 &&
			t.TargetKVTokens == 0 && t.TargetQueuedPromptTokens == 0 && t.SLO.TTFT == 0 {
			key, want := KeyTTFTSLOSeconds, "set ttftSLOSeconds (berth sizes the fleet on its SLO) or at least one of targetQueueDepth, targetConcurrency, targetQueuedPromptTokens, targetKVCacheUsage, targetKVTokens, targetTokensPerSecond (or a role, which has defaults)"
			if t.TargetTTFT > 0 || t.TargetITL > 0 || t.MaxPreemptions > 0 || t.KVSaturation > 0 {
				key, want = KeyTargetTTFTSeconds, "targetTTFTSeconds, targetITLSeconds, maxPreemptionsPerMinute and kvSaturation add replicas when violated and never size a fleet down; set ttftSLOSeconds (the SLO sizes the fleet), targetQueueDepth, targetConcurrency or targetKVCacheUsage to size it"
				switch {
				case t.TargetTTFT > 0:
				case t.TargetITL > 0:
					key = KeyTargetITLSeconds
				case t.MaxPreemptions > 0:
					key = KeyMaxPreemptions
				default:
					key = KeyKVSaturation
				}
			}
			return &InvalidKeyError{key, "", want}
		}
	}
	return nil
}

// checkKVSaturation refuses a guard that would silently do nothing or override the sizing: a
// value that rounds to 1 without being 1 (1 is "off"), and a KV target at or above the guard
// (the guard would add replicas before the fleet ever reaches its target).
func (t *Trigger) checkKVSaturation(p parser) error {
	v, set := p.get(KeyKVSaturation)
	if set && t.KVSaturation == 1 && v != "1" && v != "1.0" {
		return &InvalidKeyError{KeyKVSaturation, v, "rounds to 1, which turns the guard off; write 1 to turn it off, or at most 0.999"}
	}
	if t.KVSaturation > 0 && t.KVSaturation < 1 && t.TargetKVCacheUsage >= t.KVSaturation {
		return &InvalidKeyError{KeyTargetKVCacheUsage, strconv.FormatFloat(t.TargetKVCacheUsage, 'f', -1, 64), fmt.Sprintf(
			"at or above kvSaturation %g (role decode's default guard is %g): the guard would add replicas before the fleet reaches its target; lower it, or set kvSaturation above it (1 turns the guard off)", t.KVSaturation, DefaultKVSaturation)}
	}
	return nil
}

type parser struct{ md map[string]string }

func (p parser) get(k string) (string, bool) {
	v, ok := p.md[k]
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// target parses a positive target no larger than max, rounded to the thousandths KEDA and the
// HPA carry targets in (milli-units).
func (p parser) target(k, what string, max float64) (float64, error) {
	v, ok := p.get(k)
	if !ok {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	want := fmt.Sprintf("want a number > 0 (%s)", what)
	if max == 1 {
		want = fmt.Sprintf("want a number in (0, 1] (%s), e.g. 0.8", what)
	}
	if err != nil || math.IsNaN(f) || f > max || math.IsInf(f, 0) {
		return 0, &InvalidKeyError{k, v, want}
	}
	f = math.Round(f*1000) / 1000
	if f <= 0 {
		return 0, &InvalidKeyError{k, v, want + "; the smallest is 0.001"}
	}
	return f, nil
}

func (p parser) unknownKeys() error {
	known := map[string]bool{}
	for _, k := range AcceptedKeys() {
		known[k] = true
	}
	var bad []string
	for k := range p.md {
		if !known[k] && !kedaKeys[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return &InvalidKeyError{bad[0], "", "unknown key; accepted keys: " + strings.Join(AcceptedKeys(), ", ")}
}

func (p parser) prometheus(t *Trigger) error {
	promKeys := []string{KeyPrometheusAddress, KeyPrometheusPodLabel, KeyPrometheusNSLabel, KeyPrometheusUnsafeSSL,
		KeyPrometheusBearerTokenFromEnv, KeyPrometheusUsernameFromEnv, KeyPrometheusPasswordFromEnv, KeyPrometheusAWSRegion}
	if t.Source != SourcePrometheus && t.DemandQuery == "" {
		for _, k := range promKeys {
			if _, ok := p.get(k); ok {
				return &InvalidKeyError{k, "", "only used with source prometheus or demandQuery (source is " + string(t.Source) + ")"}
			}
		}
		return nil
	}
	v, ok := p.get(KeyPrometheusAddress)
	if !ok {
		return &InvalidKeyError{KeyPrometheusAddress, "", "required with source prometheus or demandQuery, e.g. http://prometheus-operated.monitoring:9090"}
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &InvalidKeyError{KeyPrometheusAddress, v, "want an http:// or https:// URL"}
	}
	t.Prometheus.Address = strings.TrimRight(v, "/")
	for _, l := range []struct {
		key string
		dst *string
	}{{KeyPrometheusPodLabel, &t.Prometheus.PodLabel}, {KeyPrometheusNSLabel, &t.Prometheus.NamespaceLabel}} {
		if v, ok := p.get(l.key); ok {
			if !isLabelName(v) {
				return &InvalidKeyError{l.key, v, "want a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"}
			}
			*l.dst = v
		}
	}
	if v, ok := p.get(KeyPrometheusUnsafeSSL); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return &InvalidKeyError{KeyPrometheusUnsafeSSL, v, "want true or false"}
		}
		t.Prometheus.InsecureSkipVerify = b
	}
	t.Prometheus.BearerToken, _ = p.get(KeyPrometheusBearerTokenFromEnv)
	t.Prometheus.Username, _ = p.get(KeyPrometheusUsernameFromEnv)
	t.Prometheus.Password, _ = p.get(KeyPrometheusPasswordFromEnv)
	if (t.Prometheus.Username == "") != (t.Prometheus.Password == "") {
		return &InvalidKeyError{KeyPrometheusUsernameFromEnv, "", "basic auth needs both prometheusUsernameFromEnv and prometheusPasswordFromEnv"}
	}
	if t.Prometheus.BearerToken != "" && t.Prometheus.Username != "" {
		return &InvalidKeyError{KeyPrometheusBearerTokenFromEnv, "", "use a bearer token or basic auth, not both"}
	}
	if v, ok := p.get(KeyPrometheusAWSRegion); ok {
		if !awsRegion.MatchString(v) {
			return &InvalidKeyError{KeyPrometheusAWSRegion, v, "want an AWS region, e.g. us-east-1"}
		}
		if t.Prometheus.BearerToken != "" || t.Prometheus.Username != "" {
			return &InvalidKeyError{KeyPrometheusAWSRegion, v, "SigV4 signs with the scaler's AWS credentials: not with a bearer token or basic auth (both would be sent in the Authorization header)"}
		}
		t.Prometheus.AWSRegion = v
	}
	return nil
}

// awsRegion matches AWS region names: us-east-1, eu-central-2, us-gov-west-1, cn-north-1.
var awsRegion = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

func isLabelName(s string) bool {
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// AcceptedKeys lists every trigger metadata key berth reads, in documentation order.
func AcceptedKeys() []string {
	return []string{KeyPodSelector, KeyMetricsPort, KeyMetricsPath, KeyModel, KeyTTFTSLOSeconds, KeyITLSLOSeconds, KeySLOAttainment,
		KeyColdStartSeconds, KeyHeadroomQuantile, KeyMaxHeadroom, KeyWarmSeats, KeyMinWarmSeats, KeyTargetQueueDepth, KeyTargetConcurrency,
		KeyTargetQueuedPrompt, KeyTargetKVCacheUsage, KeyTargetKVTokens, KeyKVSaturation, KeyTargetTokens, KeyTargetTTFTSeconds, KeyTargetITLSeconds, KeyMaxPreemptions, KeyFollow, KeyFollowRatio, KeyActivationQueueDepth, KeyStartupTimeout, KeyDemandQuery, KeyDemandPreset, KeyInferencePool, KeyRole, KeySource, KeyPrometheusAddress, KeyPrometheusPodLabel,
		KeyPrometheusNSLabel, KeyPrometheusUnsafeSSL, KeyPrometheusBearerTokenFromEnv, KeyPrometheusUsernameFromEnv,
		KeyPrometheusPasswordFromEnv, KeyPrometheusAWSRegion}
}

// Signals lists the signals this trigger scales on, in a fixed order.
func (t *Trigger) Signals() []Signal {
	var out []Signal
	if t.SLO.TTFT > 0 {
		out = append(out, SignalSLO)
	}
	if t.TargetQueueDepth > 0 {
		out = append(out, SignalQueue)
	}
	if t.TargetConcurrency > 0 {
		out = append(out, SignalConcurrency)
	}
	if t.TargetQueuedPromptTokens > 0 {
		out = append(out, SignalQueuedPromptTokens)
	}
	if t.TargetKVCacheUsage > 0 {
		out = append(out, SignalKVCache)
	}
	if t.TargetKVTokens > 0 {
		out = append(out, SignalKVTokens)
	}
	if t.TargetTokens > 0 {
		out = append(out, SignalTokens)
	}
	if t.TargetTTFT > 0 {
		out = append(out, SignalTTFT)
	}
	if t.TargetITL > 0 {
		out = append(out, SignalITL)
	}
	if t.MaxPreemptions > 0 {
		out = append(out, SignalPreemption)
	}
	if t.KVSaturation > 0 && t.KVSaturation < 1 { // 1: the guard is off
		out = append(out, SignalKVSaturation)
	}
	if t.Follow != "" {
		out = append(out, SignalFollow)
	}
	return out
}

// Target is the per-replica target of a signal.
func (t *Trigger) Target(s Signal) float64 {
	switch s {
	case SignalQueue:
		return t.TargetQueueDepth
	case SignalConcurrency:
		return t.TargetConcurrency
	case SignalKVCache:
		return t.TargetKVCacheUsage
	case SignalTokens:
		return t.TargetTokens
	case SignalTTFT:
		return t.TargetTTFT
	case SignalITL:
		return t.TargetITL
	case SignalPreemption:
		return t.MaxPreemptions
	case SignalQueuedPromptTokens:
		return t.TargetQueuedPromptTokens
	case SignalKVTokens:
		return t.TargetKVTokens
	case SignalKVSaturation:
		return t.KVSaturation
	case SignalFollow, SignalSLO:
		return 1 // replicas
	}
	return 0
}

// DemandPresetEndpointPicker is the demandPreset for an endpoint picker (Gateway API Inference
// Extension's EPP, llm-d's inference scheduler) with flow control on: requests it holds for an
// InferencePool while no endpoint can take them.
const DemandPresetEndpointPicker = "endpoint-picker"

// EndpointPickerDemandQuery is the PromQL of DemandPresetEndpointPicker for pool (and model, if
// set): the flow-control queue under llm-d's names (llm_d_epp_*) or the older Gateway API
// Inference Extension ones (inference_extension_*). The queue series exist only once a request
// has queued, so an empty queue reads 0 — but only while the picker itself reports its pool's
// ready endpoints: a picker that is down or no longer scraped is missing data, not zero demand.
func EndpointPickerDemandQuery(pool, model string) string {
	sel := fmt.Sprintf(`inference_pool=%q`, pool)
	if model != "" {
		sel += fmt.Sprintf(`,model_name=%q`, model)
	}
	return fmt.Sprintf(`sum(llm_d_epp_flow_control_queue_size{%[1]s}) or sum(inference_extension_flow_control_queue_size{%[1]s})`+
		` or (0 * sum(llm_d_epp_ready_endpoints{name=%[2]q})) or (0 * sum(inference_pool_ready_pods{name=%[2]q}))`, sel, pool)
}

// demandPreset turns demandPreset and inferencePool into the trigger's DemandQuery.
func (p parser) demandPreset(t *Trigger) error {
	preset, hasPreset := p.get(KeyDemandPreset)
	pool, hasPool := p.get(KeyInferencePool)
	switch {
	case !hasPreset && hasPool:
		return &InvalidKeyError{KeyInferencePool, pool, "only used with demandPreset " + DemandPresetEndpointPicker}
	case !hasPreset:
		return nil
	case t.DemandQuery != "":
		return &InvalidKeyError{KeyDemandPreset, preset, "set demandPreset or demandQuery, not both"}
	case preset != DemandPresetEndpointPicker:
		return &InvalidKeyError{KeyDemandPreset, preset, "want " + DemandPresetEndpointPicker + " (Gateway API Inference Extension or llm-d endpoint picker with flow control), or write demandQuery"}
	case !hasPool || !isLabelValue(pool):
		return &InvalidKeyError{KeyInferencePool, pool, "demandPreset " + DemandPresetEndpointPicker + " needs the InferencePool's name (the picker's --pool-name)"}
	}
	t.DemandQuery = EndpointPickerDemandQuery(pool, t.Model)
	return nil
}

// isLabelValue accepts what an InferencePool name can be (a DNS subdomain), which needs no
// escaping inside a PromQL string.
func isLabelValue(s string) bool {
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.' {
			return false
		}
	}
	return s != "" && len(s) <= 253
}

// follow reads followScaledObject and followRatio.
func (p parser) follow(t *Trigger) error {
	name, ok := p.get(KeyFollow)
	ratio, hasRatio := p.get(KeyFollowRatio)
	if !ok {
		if hasRatio {
			return &InvalidKeyError{KeyFollowRatio, ratio, "only used with followScaledObject"}
		}
		return nil
	}
	if !isLabelValue(name) || len(name) > 253 {
		return &InvalidKeyError{KeyFollow, name, "want the name of a ScaledObject in the same namespace"}
	}
	t.Follow, t.FollowRatio = name, 1
	if hasRatio {
		f, err := strconv.ParseFloat(ratio, 64)
		if err != nil || f <= 0 || f > 1000 || math.IsNaN(f) {
			return &InvalidKeyError{KeyFollowRatio, ratio, "want a number > 0: this fleet's replicas per replica of the followed one, e.g. 0.5 for one prefill replica per two decode replicas"}
		}
		t.FollowRatio = f
	}
	return nil
}

// slo reads the SLO keys: ttftSLOSeconds turns SignalSLO on; the others need it.
func (p parser) slo(t *Trigger) error {
	var err error
	if t.SLO.TTFT, err = p.target(KeyTTFTSLOSeconds, "time to first token in seconds the SLO holds requests to", math.Inf(1)); err != nil {
		return err
	}
	if t.SLO.ITL, err = p.target(KeyITLSLOSeconds, "inter-token latency in seconds the SLO holds tokens to", math.Inf(1)); err != nil {
		return err
	}
	t.SLO.Attainment, t.SLO.HeadroomQuantile, t.SLO.MaxHeadroom = DefaultSLOAttainment, DefaultHeadroomQuantile, DefaultMaxHeadroom
	for _, k := range []struct {
		key, want string
		lo, hi    float64
		dst       *float64
	}{
		{KeySLOAttainment, "want the fraction of requests that must meet the SLO, from 0.5 to 0.9999 (default 0.99)", 0.5, 0.9999, &t.SLO.Attainment},
		{KeyHeadroomQuantile, "want the quantile of the fleet's own bursts held as headroom, from 0 (none) to 1 (the largest seen; default 0.99)", 0, 1, &t.SLO.HeadroomQuantile},
		{KeyMaxHeadroom, "want the most headroom as a multiple of the baseline demand, from 1 (none) to 10 (default 3)", 1, 10, &t.SLO.MaxHeadroom},
	} {
		v, ok := p.get(k.key)
		if !ok {
			continue
		}
		f, perr := strconv.ParseFloat(v, 64)
		if perr != nil || math.IsNaN(f) || f < k.lo || f > k.hi {
			return &InvalidKeyError{k.key, v, k.want}
		}
		*k.dst = f
	}
	if v, ok := p.get(KeyColdStartSeconds); ok {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > 7200 {
			return &InvalidKeyError{KeyColdStartSeconds, v, "want whole seconds from 1 to 7200 from a scale-up to a new replica serving (node launch plus model load); unset, berth learns it from the replicas' start-ups"}
		}
		t.SLO.ColdStart = time.Duration(n) * time.Second
	}
	if err := p.warmSeats(t); err != nil {
		return err
	}
	if t.SLO.TTFT > 0 {
		return nil
	}
	for _, k := range []string{KeyITLSLOSeconds, KeySLOAttainment, KeyColdStartSeconds, KeyHeadroomQuantile, KeyMaxHeadroom, KeyWarmSeats, KeyMinWarmSeats} {
		if _, ok := p.get(k); ok {
			return &InvalidKeyError{k, "", "only used with ttftSLOSeconds, which sizes the fleet on its SLO; set it"}
		}
	}
	return nil
}

// maxWarmSeats bounds warmSeats: seats are GPU nodes held idle, a budget in replicas.
const maxWarmSeats = 1000

// warmSeats reads warmSeats and minWarmSeats: the most and the fewest of the SLO signal's
// burst headroom replicas held as warm seats.
func (p parser) warmSeats(t *Trigger) error {
	for _, k := range []struct {
		key, want string
		dst       *int
	}{
		{KeyWarmSeats, "want whole replicas from 0 to 1000: the most warm seats (nodes up with the serving image pulled) berth holds for this fleet's burst headroom, its GPU budget", &t.WarmSeats},
		{KeyMinWarmSeats, "want whole replicas from 0 to warmSeats: the warm seats berth holds whatever the headroom (for bursts the fleet's history has not shown yet)", &t.MinWarmSeats},
	} {
		v, ok := p.get(k.key)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxWarmSeats {
			return &InvalidKeyError{k.key, v, k.want}
		}
		*k.dst = n
	}
	if t.MinWarmSeats > t.WarmSeats {
		return &InvalidKeyError{KeyMinWarmSeats, strconv.Itoa(t.MinWarmSeats), fmt.Sprintf("want at most warmSeats (%d)", t.WarmSeats)}
	}
	return nil
}
