// Package gate is the pod-gate webhook, the first half of gang admission: a mutating admission
// webhook for pods that makes gang members wait for their gang by adding the scheduling gate
// scheduling.berth.dev/gang (admission removes it once the whole gang fits), and maps pods
// labelled for other gang schedulers (scheduler-plugins coscheduling, Volcano, KAI, Kueue) onto
// berth PodGroups of the same name.
package gate

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Source is one way a pod declares its gang.
type Source struct {
	// Name identifies the source (also the value of berthv1alpha1.SourceAnnotation).
	Name string
	// LabelKey is the pod label naming the gang; empty when the source uses AnnotationKey.
	LabelKey string
	// AnnotationKey is the pod annotation naming the gang, for sources without a label.
	AnnotationKey string
	// CountAnnotation, when set, is a pod annotation with the gang's total member count.
	CountAnnotation string
	// LeaderAnnotation, when set, names the gang instead of LabelKey's value (which then only
	// says the pod is the source's): a member carrying it is in the gang of the pod it names, a
	// member without it leads its gang and names it by its own name. A LeaderWorkerSet's group
	// is one gang: its workers name their leader, the leader is the group.
	LeaderAnnotation string
}

// The sources berth understands.
var (
	SourceBerth        = Source{Name: "berth", LabelKey: berthv1alpha1.PodGroupLabel}
	SourceCoscheduling = Source{Name: "coscheduling", LabelKey: berthv1alpha1.CoschedulingPodGroupLabel}
	SourceVolcano      = Source{Name: "volcano", AnnotationKey: berthv1alpha1.VolcanoGroupNameKey}
	SourceKAI          = Source{Name: "kai", AnnotationKey: berthv1alpha1.KAIPodGroupAnnotation}
	SourceKueue        = Source{Name: "kueue", LabelKey: berthv1alpha1.KueuePodGroupNameLabel, CountAnnotation: berthv1alpha1.KueuePodGroupTotalCountAnnotation}
	// SourceLWS makes each group of a LeaderWorkerSet (a leader and its workers) one gang, named
	// after the leader pod and sized by the group's size.
	SourceLWS = Source{Name: "lws", LabelKey: berthv1alpha1.LWSNameLabel, LeaderAnnotation: berthv1alpha1.LWSLeaderNameAnnotation, CountAnnotation: berthv1alpha1.LWSSizeAnnotation}
)

// Adapters are every switchable source, in order: the generated webhook configuration carries
// a webhook for each (the chart keeps those of the adapters it enables), and --adapters knows
// these names. LeaderWorkerSet comes first: a LeaderWorkerSet told to use Volcano also writes
// Volcano's annotation, and its gang is still the group.
func Adapters() []Source {
	return []Source{SourceLWS, SourceCoscheduling, SourceVolcano, SourceKAI, SourceKueue}
}

// AdapterSources are the switchable sources by name.
var AdapterSources = map[string]Source{
	SourceCoscheduling.Name: SourceCoscheduling,
	SourceVolcano.Name:      SourceVolcano,
	SourceKAI.Name:          SourceKAI,
	SourceKueue.Name:        SourceKueue,
	SourceLWS.Name:          SourceLWS,
}

// Membership is what a pod says about its gang.
type Membership struct {
	Group     string
	Source    Source
	MinMember int32 // 0 when the source does not say
}

// Resolve finds the gang a pod belongs to: berth's own label first, then each enabled adapter
// in order. ok is false for pods that are not gang members.
func Resolve(p *corev1.Pod, adapters []Source) (Membership, bool) {
	for _, s := range append([]Source{SourceBerth}, adapters...) {
		var name string
		if s.LabelKey != "" {
			name = p.Labels[s.LabelKey]
		} else {
			name = p.Annotations[s.AnnotationKey]
		}
		if name == "" {
			continue
		}
		if s.LeaderAnnotation != "" {
			name = p.Annotations[s.LeaderAnnotation]
			if name == "" {
				name = p.Name // the leader: its controller names it (a StatefulSet's pod)
			}
			if name == "" {
				continue
			}
		}
		m := Membership{Group: name, Source: s}
		if s.CountAnnotation != "" {
			if n, err := strconv.ParseInt(p.Annotations[s.CountAnnotation], 10, 32); err == nil && n > 0 {
				m.MinMember = int32(n)
			}
		}
		return m, true
	}
	return Membership{}, false
}
