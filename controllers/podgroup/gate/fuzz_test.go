package gate

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// FuzzGate sends random pods through the webhook with a random set of adapters and checks what
// it must always do: answer (allow or deny, never fail), touch nothing but labels, annotations
// and scheduling gates (and, on a member it holds, the release term appended to its required pod
// affinity unless it has required pod affinity of its own), keep every gate the pod had, gate
// exactly the members it can hold (a valid group name, no spec.nodeName), and change nothing the
// second time round.
// Short runs: go test; long runs: make fuzz.
func FuzzGate(f *testing.F) {
	f.Add("ddp", "", "", "", "", false, uint8(0), uint8(0), false)
	f.Add("", "vc", "", "", "example.com/queue", false, uint8(2), uint8(0), true)
	f.Add("kq", "", "", "4", "", false, uint8(8), uint8(3), false)
	f.Add("Bad_Name", "", "", "", "", false, uint8(0), uint8(0), false)
	f.Add("ddp", "", "x", "not-a-number", berthv1alpha1.SchedulingGate, true, uint8(15), uint8(1), true)
	f.Fuzz(func(t *testing.T, group, volcano, kai, count, otherGate string, bound bool, adapterMask, labelKind uint8, ownAffinity bool) {
		var adapters []Source
		for i, s := range []Source{SourceCoscheduling, SourceVolcano, SourceKAI, SourceKueue} {
			if adapterMask&(1<<i) != 0 {
				adapters = append(adapters, s)
			}
		}
		p := builders.Pod("m-0", "ml").Obj()
		if group != "" {
			key := []string{berthv1alpha1.PodGroupLabel, berthv1alpha1.CoschedulingPodGroupLabel, berthv1alpha1.KueuePodGroupNameLabel, "app"}[labelKind%4]
			p.Labels[key] = group
		}
		p.Annotations = map[string]string{}
		if volcano != "" {
			p.Annotations[berthv1alpha1.VolcanoGroupNameKey] = volcano
		}
		if kai != "" {
			p.Annotations[berthv1alpha1.KAIPodGroupAnnotation] = kai
		}
		if count != "" {
			p.Annotations[berthv1alpha1.KueuePodGroupTotalCountAnnotation] = count
		}
		if otherGate != "" {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: otherGate}}
		}
		if bound {
			p.Spec.NodeName = "n1"
		}
		if ownAffinity {
			p = builders.PodFrom(p).PodAffinity(corev1.LabelHostname, "app", "cache").Obj()
		}
		// The pod as the API server hands it to the webhook: JSON (invalid UTF-8 replaced).
		p = jsonRoundTrip(t, p)
		g := &Gate{Adapters: adapters, Decoder: admission.NewDecoder(clientgoscheme.Scheme)}
		resp := g.Handle(context.Background(), request(t, p))
		if resp.Result != nil && resp.Result.Code >= 500 {
			t.Fatalf("webhook failed: %+v", resp.Result)
		}
		m, member := Resolve(p, adapters)
		holdable := member && len(validation.IsDNS1123Subdomain(m.Group)) == 0 && !bound
		if member && len(validation.IsDNS1123Subdomain(m.Group)) > 0 {
			if resp.Allowed {
				t.Fatalf("member of invalid group %q allowed", m.Group)
			}
			return
		}
		if !resp.Allowed {
			t.Fatalf("denied: %+v", resp.Result)
		}
		out := applied(t, p, resp.Patches)
		if got := countGate(out); got != map[bool]int{true: 1, false: countGate(p)}[holdable] {
			t.Fatalf("holdable %v: %d berth gates after the webhook (patches %+v)", holdable, got, resp.Patches)
		}
		for i, gt := range p.Spec.SchedulingGates {
			if out.Spec.SchedulingGates[i] != gt {
				t.Fatalf("gate %d changed: %v → %v", i, gt, out.Spec.SchedulingGates[i])
			}
		}
		for k, v := range p.Labels {
			if out.Labels[k] != v && k != berthv1alpha1.PodGroupLabel {
				t.Fatalf("label %s changed: %q → %q", k, v, out.Labels[k])
			}
		}
		for k, v := range p.Annotations {
			if out.Annotations[k] != v && k != berthv1alpha1.SourceAnnotation && k != berthv1alpha1.MinMemberAnnotation {
				t.Fatalf("annotation %s changed: %q → %q", k, v, out.Annotations[k])
			}
		}
		outSpec, inSpec := out.Spec.DeepCopy(), p.Spec.DeepCopy()
		outSpec.SchedulingGates, inSpec.SchedulingGates = nil, nil
		if holdable && !ownAffinity && berthv1alpha1.CanCarryReleaseTerm(m.Group) {
			if got, ok := berthv1alpha1.ReleaseGroup(out); !ok || got != m.Group {
				t.Fatalf("member of %q held without its release term (got %q, %v)", m.Group, got, ok)
			}
			inSpec = builders.PodFrom(&corev1.Pod{Spec: *inSpec}).WithReleaseTerm(m.Group).Obj().Spec.DeepCopy()
		} else if _, ok := berthv1alpha1.ReleaseGroup(out); ok {
			t.Fatal("a release term on a pod that cannot carry one")
		}
		if !equality.Semantic.DeepEqual(outSpec, inSpec) {
			t.Fatal("the webhook changed the pod's spec beyond its scheduling gates")
		}
		again := g.Handle(context.Background(), request(t, out))
		if !again.Allowed || len(again.Patches) != 0 {
			t.Fatalf("a second pass changes the pod again: %+v", again.Patches)
		}
	})
}

func countGate(p *corev1.Pod) int {
	n := 0
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			n++
		}
	}
	return n
}

func jsonRoundTrip(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}
