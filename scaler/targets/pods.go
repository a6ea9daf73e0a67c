package targets

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler"
)

// CapacityVerdicts knows what Karpenter last said about capacity for a pending pod.
type CapacityVerdicts interface {
	// NoCapacity reports whether Karpenter's latest word on the pod is that it cannot launch a
	// node for it (and has not nominated one since).
	NoCapacity(uid types.UID) bool
}

// stuckWaitingReasons are container waiting reasons a pod does not leave by itself: the
// kubelet backs off, and only a change to the pod's spec, image or configuration helps.
// ErrImagePull is left out: it is the first, often transient, failure; ImagePullBackOff follows
// when it is not.
var stuckWaitingReasons = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// Stuck says why a pod that is not ready will not become ready by itself: a container waits
// for a reason it does not leave alone (crash loop, image pull back-off, broken
// configuration), or the pod fits no node and capacity says none is coming. "" when it may
// still come.
func Stuck(p *corev1.Pod, capacity CapacityVerdicts) scaler.StallReason {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.State.Waiting != nil && stuckWaitingReasons[cs.State.Waiting.Reason] {
				return scaler.StallCrashLoop
			}
		}
	}
	if p.Spec.NodeName == "" && unschedulable(p) && capacity != nil && capacity.NoCapacity(p.UID) {
		return scaler.StallUnschedulable
	}
	return ""
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// SlimPod is the pod cache's transform: it keeps only what the scaler reads (labels, a
// LeaderWorkerSet's group size and leader annotations, karpenter.sh/do-not-disrupt, phase,
// IP, creation time, the Ready and PodScheduled conditions, node name, why containers wait and
// when running ones started), so a cache of every pod in a large cluster stays small.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{}
	slim.Name, slim.Namespace, slim.Labels = p.Name, p.Namespace, p.Labels
	// The LWS annotations say a group's size and leader; do-not-disrupt, that a warm seat was
	// made by an older berth (the keeper takes it off).
	for _, k := range []string{berthv1alpha1.LWSSizeAnnotation, berthv1alpha1.LWSLeaderNameAnnotation, karpv1.DoNotDisruptAnnotationKey} {
		if v, ok := p.Annotations[k]; ok {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			slim.Annotations[k] = v
		}
	}
	slim.UID, slim.ResourceVersion, slim.DeletionTimestamp = p.UID, p.ResourceVersion, p.DeletionTimestamp
	slim.CreationTimestamp = p.CreationTimestamp
	slim.Spec.NodeName = p.Spec.NodeName
	slim.Status.Phase, slim.Status.PodIP = p.Status.Phase, p.Status.PodIP
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			slim.Status.Conditions = append(slim.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, LastTransitionTime: c.LastTransitionTime})
		}
	}
	slim.Status.InitContainerStatuses = slimStatuses(p.Status.InitContainerStatuses)
	slim.Status.ContainerStatuses = slimStatuses(p.Status.ContainerStatuses)
	return slim, nil
}

// slimStatuses keeps the waiting reason of containers that wait and when running ones started.
func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, cs := range in {
		switch {
		case cs.State.Waiting != nil:
			out = append(out, corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: cs.State.Waiting.Reason}}})
		case cs.State.Running != nil:
			out = append(out, corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: cs.State.Running.StartedAt}}})
		}
	}
	return out
}

// startedAt is when the longest-running of the pod's containers started (zero unless every
// container runs): the newest process of a pod whose containers all started after it.
func startedAt(p *corev1.Pod) time.Time {
	var first time.Time
	if len(p.Status.ContainerStatuses) == 0 {
		return first
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return time.Time{}
		}
		if t := cs.State.Running.StartedAt.Time; first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyAt is when a ready pod's Ready condition turned true; zero when it is not ready.
func readyAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
