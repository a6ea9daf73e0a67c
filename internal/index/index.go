// Package index names the informer-cache field indexes several of berth's controllers share and
// registers them once per manager (a field can be indexed only once).
package index

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// PodGroupMembers indexes pods by the PodGroup they are members of (the pod-group label's
// value). Listed with client.InNamespace and client.MatchingFields{PodGroupMembers: name}, a
// gang's members come from the index instead of a walk over every pod of the namespace
// (10,000 pods for each of 500 gangs' reconciles, measured in the footprint benchmark).
const PodGroupMembers = "berth.podGroupMembers"

// NativeGroupMembers indexes pods by the native PodGroup (scheduling.k8s.io) they belong to
// (spec.schedulingGroup.podGroupName).
const NativeGroupMembers = "berth.nativeGroupMembers"

// Register adds every shared index to idx.
func Register(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, PodGroupMembers, podGroupOf); err != nil {
		return fmt.Errorf("indexing pods by PodGroup: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, NativeGroupMembers, nativeGroupOf); err != nil {
		return fmt.Errorf("indexing pods by native PodGroup: %w", err)
	}
	return nil
}

// nativeGroupOf is the NativeGroupMembers index value of a pod: its native PodGroup, if any.
func nativeGroupOf(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok && p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil && *p.Spec.SchedulingGroup.PodGroupName != "" {
		return []string{*p.Spec.SchedulingGroup.PodGroupName}
	}
	return nil
}

// podGroupOf is the index value of a pod: the PodGroup it is a member of, if any.
func podGroupOf(o client.Object) []string {
	if g := o.GetLabels()[berthv1alpha1.PodGroupLabel]; g != "" {
		return []string{g}
	}
	return nil
}

// Members are the list options for the members of PodGroup name in namespace ns, from the
// index. The pods listed are the cache's own (no deep copy): a caller must not modify them.
func Members(ns, name string) []client.ListOption {
	return []client.ListOption{client.InNamespace(ns), client.MatchingFields{PodGroupMembers: name}, client.UnsafeDisableDeepCopy}
}
