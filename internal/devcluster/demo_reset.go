package devcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler/targets"
)

// resetTimeout bounds the clean-up of an earlier demo run.
const resetTimeout = 90 * time.Second

// demoPools are the NodePools whose nodes the demo launches: every scene expects to start
// with none of them, so that Karpenter's launches show.
func demoPools() []string {
	return []string{rig.GPUNodePoolName("h100"), rig.GPUNodePoolName(provisionProduct), guardedPool, auditPool, rig.GPUNodePoolName(inferencePool), rig.GPUNodePoolName(lwsProduct)}
}

// resetDemo removes what an earlier run left: the demo namespace's workloads, the NodePools the
// demo creates, the cap scene 2 puts on the H100 pool, and the idle nodes of the pools the demo
// uses (their NodeClaims are deleted, so Karpenter terminates them now instead of after
// consolidateAfter). Nodes that run pods of other namespaces are left alone.
func resetDemo(ctx context.Context, c client.Client, p *printer) error {
	ctx, cancel := context.WithTimeout(ctx, resetTimeout)
	defer cancel()
	if err := resetNamespace(ctx, c); err != nil {
		return err
	}
	if err := restoreGPULimit(ctx, c, rig.GPUNodePoolName("h100")); err != nil {
		return err
	}
	for _, name := range []string{guardedPool, auditPool} {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Delete(ctx, np); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing the demo NodePool %s: %w", name, err)
		}
	}
	stale, err := staleDemoClaims(ctx, c)
	if err != nil || len(stale) == 0 {
		return err
	}
	p.say("removing %d idle node(s) left by an earlier demo run", len(stale))
	for i := range stale {
		if stale[i].DeletionTimestamp != nil {
			continue
		}
		if err := c.Delete(ctx, &stale[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting NodeClaim %s: %w", stale[i].Name, err)
		}
	}
	return waitGone(ctx, c, stale)
}

// resetNamespace creates the demo namespace, or empties it of ScaledObjects, LeaderWorkerSets,
// Deployments,
// ReplicaSets, PodGroups and pods, and waits until its pods are gone.
func resetNamespace(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", DemoNamespace, err)
	}
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(targets.ScaledObjectGVK)
	lws := &unstructured.Unstructured{}
	lws.SetGroupVersionKind(vllmsim.LeaderWorkerSetGVK)
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, kind := range []struct {
		name string
		obj  client.Object
		opt  client.DeleteAllOfOption
	}{
		{"ScaledObjects", so, background},
		{"LeaderWorkerSets", lws, background},
		{"Deployments", &appsv1.Deployment{}, background},
		{"ReplicaSets", &appsv1.ReplicaSet{}, background},
		{"PodGroups", &berthv1alpha1.PodGroup{}, background},
		{"pods", &corev1.Pod{}, client.GracePeriodSeconds(0)},
	} {
		// A cluster without KEDA's (or LeaderWorkerSet's) CRDs has none of them to remove.
		if err := c.DeleteAllOf(ctx, kind.obj, client.InNamespace(DemoNamespace), kind.opt); err != nil && !meta.IsNoMatchError(err) {
			return fmt.Errorf("removing earlier demo %s: %w", kind.name, err)
		}
	}
	var left int
	err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(DemoNamespace)); err != nil {
			return false, fmt.Errorf("listing demo pods: %w", err)
		}
		left = len(pods.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d earlier demo pods to go: %w", left, err)
	}
	return nil
}

// staleDemoClaims are the NodeClaims of the demo's NodePools that are being deleted or whose
// nodes run no pod (other than DaemonSet pods and pods being deleted).
func staleDemoClaims(ctx context.Context, c client.Client) ([]karpv1.NodeClaim, error) {
	byProvider, err := nodesByProviderID(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []karpv1.NodeClaim
	for _, pool := range demoPools() {
		claims, err := claimsOf(ctx, c, pool)
		if err != nil {
			return nil, err
		}
		for _, nc := range claims {
			busy, err := nodeBusy(ctx, c, nodeNameOf(&nc, byProvider))
			if err != nil {
				return nil, err
			}
			if !busy || nc.DeletionTimestamp != nil {
				out = append(out, nc)
			}
		}
	}
	return out, nil
}

// nodeBusy reports whether a node runs a pod that is neither a DaemonSet's nor being deleted.
func nodeBusy(ctx context.Context, c client.Client, node string) (bool, error) {
	if node == "" {
		return false, nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return false, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	return slices.ContainsFunc(pods.Items, func(pod corev1.Pod) bool {
		owner := metav1.GetControllerOf(&pod)
		return pod.DeletionTimestamp == nil && (owner == nil || owner.Kind != "DaemonSet")
	}), nil
}

// claimsOf lists a NodePool's NodeClaims, sorted by name.
func claimsOf(ctx context.Context, c client.Client, pool string) ([]karpv1.NodeClaim, error) {
	var list karpv1.NodeClaimList
	if err := c.List(ctx, &list, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		return nil, fmt.Errorf("listing NodeClaims of NodePool %s: %w", pool, err)
	}
	slices.SortFunc(list.Items, func(a, b karpv1.NodeClaim) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// nodesByProviderID maps provider IDs to node names: a NodeClaim has its node's provider ID
// from launch on, but names the node only once Karpenter has registered it, which can be
// after the node is Ready and running pods.
func nodesByProviderID(ctx context.Context, c client.Client) (map[string]string, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make(map[string]string, len(nodes.Items))
	for _, n := range nodes.Items {
		if n.Spec.ProviderID != "" {
			out[n.Spec.ProviderID] = n.Name
		}
	}
	return out, nil
}

// nodeNameOf is the name of a NodeClaim's node, empty when there is none yet.
func nodeNameOf(nc *karpv1.NodeClaim, byProvider map[string]string) string {
	if nc.Status.NodeName != "" {
		return nc.Status.NodeName
	}
	return byProvider[nc.Status.ProviderID]
}
