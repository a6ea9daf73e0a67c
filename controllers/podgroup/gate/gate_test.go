package gate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatchv5 "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func request(t *testing.T, p *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}}
}

// applied returns the pod after the response's patches, applied as the API server does.
func applied(t *testing.T, p *corev1.Pod, patches []jsonpatch.Operation) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := json.Marshal(patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatchv5.DecodePatch(ops)
	if err != nil {
		t.Fatalf("decoding patches %s: %v", ops, err)
	}
	if raw, err = patch.Apply(raw); err != nil {
		t.Fatalf("applying patches %s: %v", ops, err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGate(t *testing.T) {
	dec := admission.NewDecoder(clientgoscheme.Scheme)
	g := &Gate{Adapters: Adapters(), Decoder: dec}
	kueuePod := builders.Pod("k", "ml").Label("kueue.x-k8s.io/pod-group-name", "kq").Obj()
	kueuePod.Annotations = map[string]string{"kueue.x-k8s.io/pod-group-total-count": "4"}
	volcanoPod := builders.Pod("a", "ml").Obj()
	volcanoPod.Annotations = map[string]string{"scheduling.k8s.io/group-name": "vc"}
	kaiPod := builders.Pod("kai", "ml").Obj()
	kaiPod.Annotations = map[string]string{"pod-group-name": "kai-group"}
	// A LeaderWorkerSet's group of 4: its leader (named by its StatefulSet) and a worker naming
	// it; a leader told to use Volcano carries Volcano's annotation too.
	lwsLeader := builders.Pod("llm-1", "ml").Label("leaderworkerset.sigs.k8s.io/name", "llm").Label("leaderworkerset.sigs.k8s.io/worker-index", "0").Obj()
	lwsLeader.Annotations = map[string]string{"leaderworkerset.sigs.k8s.io/size": "4", "scheduling.k8s.io/group-name": "llm-1-abc"}
	lwsWorker := builders.Pod("llm-1-3", "ml").Label("leaderworkerset.sigs.k8s.io/name", "llm").Obj()
	lwsWorker.Annotations = map[string]string{"leaderworkerset.sigs.k8s.io/size": "4", "leaderworkerset.sigs.k8s.io/leader-name": "llm-1"}
	lwsExclusive := lwsWorker.DeepCopy()
	lwsExclusive.Annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"] = "topology.kubernetes.io/zone"
	tests := []struct {
		name      string
		pod       *corev1.Pod
		allowed   bool
		gated     bool
		group     string
		source    string
		minMember string
		warning   string
		denied    string
		noTerm    bool
	}{
		{name: "unlabelled pod untouched", pod: builders.Pod("a", "ml").Obj(), allowed: true},
		{name: "berth member gated", pod: builders.Pod("a", "ml").Member("g").Obj(), allowed: true, gated: true, group: "g"},
		{name: "already gated stays once", pod: builders.Pod("a", "ml").Member("g").Gated().Obj(), allowed: true, gated: true, group: "g"},
		{name: "coscheduling adapted", pod: builders.Pod("a", "ml").Label("scheduling.x-k8s.io/pod-group", "cs").Obj(), allowed: true, gated: true, group: "cs", source: "coscheduling"},
		{name: "volcano adapted from its annotation", pod: volcanoPod, allowed: true, gated: true, group: "vc", source: "volcano"},
		{name: "volcano's key as a label is not Volcano's", pod: builders.Pod("a", "ml").Label("scheduling.k8s.io/group-name", "vc").Obj(), allowed: true},
		{name: "kai annotation adapted", pod: kaiPod, allowed: true, gated: true, group: "kai-group", source: "kai"},
		{name: "kueue with count", pod: kueuePod, allowed: true, gated: true, group: "kq", source: "kueue", minMember: "4"},
		{name: "lws leader leads its group's gang, over Volcano's annotation", pod: lwsLeader, allowed: true, gated: true, group: "llm-1", source: "lws", minMember: "4"},
		{name: "lws worker joins its leader's gang", pod: lwsWorker, allowed: true, gated: true, group: "llm-1", source: "lws", minMember: "4"},
		{name: "lws exclusive placement is left to LeaderWorkerSet", pod: lwsExclusive, allowed: true, warning: "cannot admit the group whole"},
		{name: "berth label wins over adapters", pod: builders.Pod("a", "ml").Member("mine").Label("scheduling.x-k8s.io/pod-group", "theirs").Obj(), allowed: true, gated: true, group: "mine"},
		{name: "member with pod affinity of its own gated without a release term", pod: builders.Pod("a", "ml").Member("g").PodAffinity("kubernetes.io/hostname", "app", "cache").Obj(), allowed: true, gated: true, group: "g", noTerm: true},
		{name: "member of a gang whose name is no label value gated without a release term", pod: builders.Pod("a", "ml").Member(strings.Repeat("g", 70)).Obj(), allowed: true, gated: true, group: strings.Repeat("g", 70), noTerm: true},
		{name: "bound pod not gated", pod: builders.Pod("a", "ml").Member("g").Node("n1").Obj(), allowed: true, warning: "sets spec.nodeName"},
		{name: "invalid group name denied", pod: builders.Pod("a", "ml").Label("scheduling.x-k8s.io/pod-group", "Not_A_Name").Obj(), denied: "is not a valid PodGroup name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := g.Handle(context.Background(), request(t, tt.pod))
			if tt.denied != "" {
				if resp.Allowed || !strings.Contains(resp.Result.Message, tt.denied) {
					t.Fatalf("response %+v, want denial with %q", resp.Result, tt.denied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if tt.warning != "" && (len(resp.Warnings) == 0 || !strings.Contains(resp.Warnings[0], tt.warning)) {
				t.Errorf("warnings %v, want one with %q", resp.Warnings, tt.warning)
			}
			got := applied(t, tt.pod, resp.Patches)
			gates := 0
			for _, gate := range got.Spec.SchedulingGates {
				if gate.Name == "scheduling.berth.dev/gang" {
					gates++
				}
			}
			if tt.gated != (gates == 1) || gates > 1 {
				t.Errorf("berth gates = %d, want gated=%v", gates, tt.gated)
			}
			if rg, ok := berthv1alpha1.ReleaseGroup(got); (tt.gated && !tt.noTerm) != ok || (ok && rg != tt.group) {
				t.Errorf("release term for %q (%v), want one for %q only when gated", rg, ok, tt.group)
			}
			if tt.group != "" && got.Labels["scheduling.berth.dev/pod-group"] != tt.group {
				t.Errorf("pod-group label = %q, want %q", got.Labels["scheduling.berth.dev/pod-group"], tt.group)
			}
			if got.Annotations[berthv1alpha1.SourceAnnotation] != tt.source {
				t.Errorf("source annotation = %q, want %q", got.Annotations[berthv1alpha1.SourceAnnotation], tt.source)
			}
			if got.Annotations[berthv1alpha1.MinMemberAnnotation] != tt.minMember {
				t.Errorf("min-member annotation = %q, want %q", got.Annotations[berthv1alpha1.MinMemberAnnotation], tt.minMember)
			}
			if !tt.gated && len(resp.Patches) != 0 {
				t.Errorf("pod that is not gated was patched: %+v", resp.Patches)
			}
		})
	}
}

func TestGateRejectsGarbage(t *testing.T) {
	g := &Gate{Decoder: admission.NewDecoder(clientgoscheme.Scheme)}
	resp := g.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Object: runtime.RawExtension{Raw: []byte("{not json")}}})
	if resp.Allowed || resp.Result.Code != 400 {
		t.Errorf("garbage request: %+v", resp.Result)
	}
}

func TestConfigurationScopesEveryWebhook(t *testing.T) {
	url := "https://127.0.0.1:9443/x"
	cfg := Configuration(admissionRegistrationURL(url), []Source{SourceKueue, SourceKAI})
	if len(cfg.Webhooks) != 3 {
		t.Fatalf("%d webhooks, want berth + 2 adapters", len(cfg.Webhooks))
	}
	for _, w := range cfg.Webhooks {
		if w.ObjectSelector == nil && len(w.MatchConditions) == 0 {
			t.Errorf("webhook %s matches every pod: unlabelled pods would depend on it", w.Name)
		}
		if *w.FailurePolicy != "Fail" {
			t.Errorf("webhook %s failure policy %s, want Fail", w.Name, *w.FailurePolicy)
		}
	}
}
