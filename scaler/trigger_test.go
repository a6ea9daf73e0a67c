package scaler

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestParseTriggerDefaults(t *testing.T) {
	tr := trig(t, map[string]string{"targetQueueDepth": "4", "scalerAddress": "berth-scaler.berth:9090", "enableTLS": "true"})
	if tr.MetricsPort != 8000 || tr.MetricsPath != "/metrics" || tr.Source != SourcePods || tr.Role != RoleBoth || tr.PodSelector != nil {
		t.Fatalf("defaults = %+v", tr)
	}
	if got := tr.Signals(); len(got) != 1 || got[0] != SignalQueue {
		t.Fatalf("signals = %v", got)
	}
	if tr.StartupTimeout != 10*time.Minute {
		t.Fatalf("startup timeout = %v, want 10m", tr.StartupTimeout)
	}
	if tr = trig(t, map[string]string{"targetQueueDepth": "4", "startupTimeoutSeconds": "240"}); tr.StartupTimeout != 4*time.Minute {
		t.Fatalf("startup timeout = %v, want 4m", tr.StartupTimeout)
	}
	tr = trig(t, map[string]string{"targetKVCacheUsage": "0.75", "targetTTFTSeconds": "0.4", "podSelector": "app=vllm, tier in (gpu)",
		"metricsPort": "8080", "metricsPath": "/vllm/metrics", "model": "llama", "activationQueueDepth": "1.5",
		"source": "prometheus", "prometheusAddress": "http://prom:9090/", "prometheusPodLabel": "kubernetes_pod_name",
		"prometheusBearerTokenFromEnv": "tok"})
	if tr.PodSelector.String() != "app=vllm,tier in (gpu)" || tr.MetricsPort != 8080 || tr.Model != "llama" || tr.ActivationQueueDepth != 1.5 ||
		tr.Prometheus.Address != "http://prom:9090" || tr.Prometheus.PodLabel != "kubernetes_pod_name" || tr.Prometheus.NamespaceLabel != "namespace" ||
		tr.Prometheus.BearerToken != "tok" || tr.TargetTTFT != 0.4 {
		t.Fatalf("parsed = %+v", tr)
	}
	for _, region := range []string{"us-east-1", "eu-central-2", "us-gov-west-1", "ap-southeast-4"} {
		tr = trig(t, map[string]string{"targetQueueDepth": "4", "source": "prometheus",
			"prometheusAddress": "https://aps-workspaces." + region + ".amazonaws.com/workspaces/ws-1", "prometheusAwsRegion": region})
		if tr.Prometheus.AWSRegion != region {
			t.Errorf("prometheusAwsRegion %s: parsed %q", region, tr.Prometheus.AWSRegion)
		}
	}
}

func TestParseTriggerErrors(t *testing.T) {
	tests := []struct {
		md      map[string]string
		key     string
		message string
	}{
		{map[string]string{}, "ttftSLOSeconds", "at least one of"},
		{map[string]string{"targetQueueDeph": "4"}, "targetQueueDeph", "unknown key; accepted keys: podSelector"},
		{map[string]string{"targetQueueDepth": "-1"}, "targetQueueDepth", "want a number > 0"},
		{map[string]string{"targetQueueDepth": "0.0001"}, "targetQueueDepth", "smallest is 0.001"},
		{map[string]string{"targetQueueDepth": "four"}, "targetQueueDepth", "want a number > 0"},
		{map[string]string{"targetQueueDepth": "NaN"}, "targetQueueDepth", "want a number > 0"},
		{map[string]string{"targetKVCacheUsage": "80"}, "targetKVCacheUsage", "(0, 1]"},
		{map[string]string{"targetQueueDepth": "4", "metricsPort": "0"}, "metricsPort", "1-65535"},
		{map[string]string{"targetQueueDepth": "4", "metricsPath": "metrics"}, "metricsPath", "absolute URL path"},
		{map[string]string{"targetQueueDepth": "4", "podSelector": "app in vllm"}, "podSelector", "label selector"},
		{map[string]string{"targetQueueDepth": "4", "role": "router"}, "role", "prefill, decode, both"},
		{map[string]string{"targetQueueDepth": "4", "source": "dcgm"}, "source", "pods, prometheus"},
		{map[string]string{"targetQueueDepth": "4", "activationQueueDepth": "-2"}, "activationQueueDepth", ">= 0"},
		{map[string]string{"targetQueueDepth": "4", "role": "decode"}, "role", "decode scales on the KV cache"},
		{map[string]string{"targetTTFTSeconds": "0.5"}, "targetTTFTSeconds", "never size a fleet down"},
		{map[string]string{"targetITLSeconds": "0.05"}, "targetITLSeconds", "never size a fleet down"},
		{map[string]string{"targetQueueDepth": "4", "targetITLSeconds": "0.05", "role": "prefill"}, "targetITLSeconds", "not used by role prefill"},
		{map[string]string{"kvSaturation": "0.9"}, "kvSaturation", "never size a fleet down"},
		{map[string]string{"kvSaturation": "95", "role": "decode"}, "kvSaturation", "(0, 1]"},
		{map[string]string{"targetKVTokens": "40000", "role": "prefill"}, "targetKVTokens", "not used by role prefill"},
		{map[string]string{"kvSaturation": "0.9", "role": "prefill"}, "kvSaturation", "not used by role prefill"},
		{map[string]string{"targetQueuedPromptTokens": "4096", "role": "decode"}, "role", "remove targetQueueDepth, targetQueuedPromptTokens"},
		{map[string]string{"targetQueuedPromptTokens": "-1"}, "targetQueuedPromptTokens", "want a number > 0"},
		{map[string]string{"role": "decode", "targetKVCacheUsage": "0.97"}, "targetKVCacheUsage", "at or above kvSaturation 0.95"},
		{map[string]string{"targetConcurrency": "8", "kvSaturation": "0.9996"}, "kvSaturation", "rounds to 1"},
		{map[string]string{"targetConcurrency": "0"}, "targetConcurrency", "want a number > 0"},
		{map[string]string{"targetQueueDepth": "4", "followRatio": "0.5"}, "followRatio", "only used with followScaledObject"},
		{map[string]string{"targetQueueDepth": "4", "followScaledObject": "decode", "followRatio": "-1"}, "followRatio", "want a number > 0"},
		{map[string]string{"targetQueueDepth": "4", "followScaledObject": "Not_A_Name"}, "followScaledObject", "same namespace"},
		{map[string]string{"targetQueueDepth": "4", "startupTimeoutSeconds": "0"}, "startupTimeoutSeconds", "whole seconds from 1 to 86400"},
		{map[string]string{"targetQueueDepth": "4", "startupTimeoutSeconds": "1.5"}, "startupTimeoutSeconds", "whole seconds"},
		{map[string]string{"targetKVCacheUsage": "0.8", "role": "prefill"}, "targetKVCacheUsage", "not used by role prefill"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus"}, "prometheusAddress", "required with source prometheus or demandQuery"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "prom:9090"}, "prometheusAddress", "http:// or https://"},
		{map[string]string{"targetQueueDepth": "4", "prometheusAddress": "http://prom:9090"}, "prometheusAddress", "only used with source prometheus or demandQuery"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "http://p", "prometheusPodLabel": "pod-name"}, "prometheusPodLabel", "label name"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "http://p", "prometheusUsernameFromEnv": "u"}, "prometheusUsernameFromEnv", "both"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "https://aps", "prometheusAwsRegion": "us-east"}, "prometheusAwsRegion", "want an AWS region"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "https://aps", "prometheusAwsRegion": "US-EAST-1"}, "prometheusAwsRegion", "want an AWS region"},
		{map[string]string{"targetQueueDepth": "4", "source": "prometheus", "prometheusAddress": "https://aps", "prometheusAwsRegion": "us-east-1", "prometheusBearerTokenFromEnv": "t"}, "prometheusAwsRegion", "not with a bearer token"},
		{map[string]string{"targetQueueDepth": "4", "prometheusAwsRegion": "us-east-1"}, "prometheusAwsRegion", "only used with source prometheus or demandQuery"},
	}
	for _, tc := range tests {
		_, err := ParseTrigger(tc.md)
		var ik *InvalidKeyError
		if !errors.As(err, &ik) {
			t.Errorf("%v: err = %v, want an InvalidKeyError", tc.md, err)
			continue
		}
		if ik.Key != tc.key || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%v: err = %q (key %q), want key %q and %q", tc.md, err, ik.Key, tc.key, tc.message)
		}
	}
}

// TestRoleDefaults: a role fills in the signals it sizes on when the trigger names none, and
// never overrides what the trigger says.
func TestRoleDefaults(t *testing.T) {
	for _, tc := range []struct {
		md   map[string]string
		want map[Signal]float64
	}{
		{map[string]string{"role": "prefill"}, map[Signal]float64{SignalQueuedPromptTokens: DefaultPrefillQueuedPromptTokens}},
		{map[string]string{"role": "prefill", "targetTTFTSeconds": "0.5"}, map[Signal]float64{SignalQueuedPromptTokens: DefaultPrefillQueuedPromptTokens, SignalTTFT: 0.5}},
		{map[string]string{"role": "prefill", "targetQueueDepth": "4"}, map[Signal]float64{SignalQueue: 4}},
		{map[string]string{"role": "decode"}, map[Signal]float64{SignalKVCache: DefaultDecodeKVCacheUsage, SignalKVSaturation: DefaultKVSaturation}},
		{map[string]string{"role": "decode", "targetConcurrency": "48"}, map[Signal]float64{SignalConcurrency: 48, SignalKVCache: DefaultDecodeKVCacheUsage, SignalKVSaturation: DefaultKVSaturation}},
		{map[string]string{"role": "decode", "targetKVTokens": "400000"}, map[Signal]float64{SignalKVTokens: 400000, SignalKVSaturation: DefaultKVSaturation}},
		{map[string]string{"role": "decode", "kvSaturation": "0.9"}, map[Signal]float64{SignalKVCache: DefaultDecodeKVCacheUsage, SignalKVSaturation: 0.9}},
		{map[string]string{"role": "decode", "kvSaturation": "1"}, map[Signal]float64{SignalKVCache: DefaultDecodeKVCacheUsage}},
		{map[string]string{"targetKVCacheUsage": "0.7"}, map[Signal]float64{SignalKVCache: 0.7}},
		{map[string]string{"role": "prefill", "kvSaturation": "1"}, map[Signal]float64{SignalQueuedPromptTokens: DefaultPrefillQueuedPromptTokens}},
		{map[string]string{"role": "decode", "targetKVCacheUsage": "0.97", "kvSaturation": "1"}, map[Signal]float64{SignalKVCache: 0.97}},
	} {
		tr, err := ParseTrigger(tc.md)
		if err != nil {
			t.Errorf("%v: %v", tc.md, err)
			continue
		}
		got := map[Signal]float64{}
		for _, s := range tr.Signals() {
			got[s] = tr.Target(s)
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("%v: signals = %v, want %v", tc.md, got, tc.want)
		}
	}
}

// FuzzParseTrigger: any metadata either parses into a trigger that scales on something, or is
// refused with an error naming a key — never a panic, never a trigger without a signal.
func FuzzParseTrigger(f *testing.F) {
	f.Add("targetQueueDepth", "4", "podSelector", "app=vllm")
	f.Add("targetKVCacheUsage", "0.8", "role", "decode")
	f.Add("source", "prometheus", "prometheusAddress", "http://x")
	f.Add("metricsPort", "99999", "targetTTFTSeconds", "1e308")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		md := map[string]string{k1: v1, k2: v2}
		tr, err := ParseTrigger(md)
		if err != nil {
			var ik *InvalidKeyError
			if !errors.As(err, &ik) || ik.Key == "" {
				t.Fatalf("error without a key: %v", err)
			}
			return
		}
		if len(tr.Signals()) == 0 {
			t.Fatalf("trigger %+v scales on nothing", tr)
		}
		for _, s := range tr.Signals() {
			if tg := tr.Target(s); !(tg >= 0.001) {
				t.Fatalf("%s target %v", s, tg)
			}
		}
	})
}

func TestDemandTriggers(t *testing.T) {
	tr := trig(t, map[string]string{"targetQueueDepth": "4", "demandQuery": `sum(router_queue{model="m"})`, "prometheusAddress": "http://prom:9090"})
	if tr.Source != SourcePods || tr.DemandQuery != `sum(router_queue{model="m"})` || tr.Prometheus.Address != "http://prom:9090" {
		t.Fatalf("parsed %+v", tr)
	}
	tr = trig(t, map[string]string{"targetConcurrency": "8", "demandPreset": "endpoint-picker", "inferencePool": "llama-pool", "model": "llama",
		"prometheusAddress": "http://prom:9090"})
	want := `sum(llm_d_epp_flow_control_queue_size{inference_pool="llama-pool",model_name="llama"}) or sum(inference_extension_flow_control_queue_size{inference_pool="llama-pool",model_name="llama"}) or (0 * sum(llm_d_epp_ready_endpoints{name="llama-pool"})) or (0 * sum(inference_pool_ready_pods{name="llama-pool"}))`
	if tr.DemandQuery != want {
		t.Fatalf("preset query\n got %s\nwant %s", tr.DemandQuery, want)
	}
	for _, tc := range []struct {
		md           map[string]string
		key, message string
	}{
		{map[string]string{"targetQueueDepth": "4", "demandQuery": "q"}, "prometheusAddress", "required with source prometheus or demandQuery"},
		{map[string]string{"targetKVCacheUsage": "0.8", "demandQuery": "q", "prometheusAddress": "http://p"}, "demandQuery", "targetQueueDepth or targetConcurrency"},
		{map[string]string{"targetQueueDepth": "4", "demandPreset": "production-stack", "prometheusAddress": "http://p"}, "demandPreset", "want endpoint-picker"},
		{map[string]string{"targetQueueDepth": "4", "demandPreset": "endpoint-picker", "prometheusAddress": "http://p"}, "inferencePool", "needs the InferencePool's name"},
		{map[string]string{"targetQueueDepth": "4", "demandPreset": "endpoint-picker", "inferencePool": `a"b`, "prometheusAddress": "http://p"}, "inferencePool", "needs the InferencePool's name"},
		{map[string]string{"targetQueueDepth": "4", "inferencePool": "p"}, "inferencePool", "only used with demandPreset"},
		{map[string]string{"targetQueueDepth": "4", "demandPreset": "endpoint-picker", "inferencePool": "p", "demandQuery": "q", "prometheusAddress": "http://p"}, "demandPreset", "not both"},
	} {
		_, err := ParseTrigger(tc.md)
		var ik *InvalidKeyError
		if !errors.As(err, &ik) || ik.Key != tc.key || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%v: err = %v, want key %s and %q", tc.md, err, tc.key, tc.message)
		}
	}
}
