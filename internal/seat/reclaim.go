package seat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

// Reclaiming an incomplete batch. Karpenter launches each NodeClaim on its own
// (karpenter#3138): when a batch of seats does not all get Ready nodes within its timeout, the
// nodes that did come up would stay, empty, until consolidation takes them — billed all that
// time for capacity nobody can use. Reclaim deletes them when the attempt ends.

// nominatedReason and nominatedPrefix are Karpenter's Event on a pod it plans a NodeClaim for
// ("Pod should schedule on: nodeclaim/<name>, node/<name>").
const (
	nominatedReason = "Nominated"
	nodeClaimRef    = "nodeclaim/"
)

// reclaimed counts NodeClaims deleted by Reclaim.
var reclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: bmetrics.Namespace, Subsystem: "seat", Name: "reclaimed_nodeclaims_total",
	Help: "NodeClaims Karpenter launched for a batch of seats that did not all get Ready nodes in time, deleted by berth when the attempt ended because no pod used them, by NodePool and by who asked (podgroup, provisioningrequest).",
}, []string{bmetrics.LabelNodePool, "owner"})

func init() { ctrlmetrics.Registry.MustRegister(Collectors()...) }

// Collectors are the package's metrics, for the metrics reference.
func Collectors() []prometheus.Collector { return []prometheus.Collector{reclaimed} }

// Reclaim deletes the NodeClaims launched for seats (those seats are bound to, and those
// Karpenter nominated them to, created no earlier than the first seat) that no other pod uses:
// no pod but the seats and DaemonSet pods is bound to their node, or they have no node yet. It runs when an attempt ends incomplete,
// before its seats are deleted. live reads around the cache (pods on a node, Events); owner
// labels the metric. It returns the NodeClaims deleted.
func Reclaim(ctx context.Context, c client.Client, live client.Reader, seats []*corev1.Pod, owner string) ([]string, error) {
	if len(seats) == 0 {
		return nil, nil
	}
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil // no Karpenter: nothing was launched
		}
		return nil, fmt.Errorf("listing NodeClaims: %w", err)
	}
	byName := map[string]*karpv1.NodeClaim{}
	byNode := map[string]*karpv1.NodeClaim{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		byName[nc.Name] = nc
		if nc.Status.NodeName != "" {
			byNode[nc.Status.NodeName] = nc
		}
	}
	ours := map[types.UID]bool{}
	candidates := map[string]*karpv1.NodeClaim{}
	var errs []error
	first := seats[0].CreationTimestamp.Time
	for _, s := range seats {
		if s.CreationTimestamp.Before(&metav1.Time{Time: first}) {
			first = s.CreationTimestamp.Time
		}
	}
	for _, s := range seats {
		ours[s.UID] = true
		if nc := byNode[s.Spec.NodeName]; s.Spec.NodeName != "" && nc != nil {
			candidates[nc.Name] = nc
		}
		names, err := Nominated(ctx, live, s)
		errs = append(errs, err)
		for _, n := range names {
			if nc := byName[n]; nc != nil {
				candidates[n] = nc
			}
		}
	}
	var deleted []string
	for name, nc := range candidates {
		// A node older than the batch was not launched for it: a seat bound to a node that
		// was there (pinned to room a check-capacity request found, or put by kube-scheduler on
		// an idle node) leaves it be — it may be reserved capacity, or another team's.
		if nc.DeletionTimestamp != nil || nc.CreationTimestamp.Time.Before(first.Truncate(time.Second)) {
			continue
		}
		used, err := usedByOthers(ctx, live, nc, ours)
		if err != nil || used {
			errs = append(errs, err)
			continue
		}
		uid := nc.UID
		switch err := c.Delete(ctx, nc, client.Preconditions{UID: &uid}); {
		case err == nil:
			deleted = append(deleted, name)
			reclaimed.WithLabelValues(nc.Labels[karpv1.NodePoolLabelKey], owner).Inc()
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			errs = append(errs, fmt.Errorf("deleting NodeClaim %s: %w", name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// Nominated are the NodeClaims Karpenter said pod s (a seat, or any pending pod) should
// schedule on, from its Nominated Events (read live: the cache holds no Events).
func Nominated(ctx context.Context, live client.Reader, s *corev1.Pod) ([]string, error) {
	var evs corev1.EventList
	sel := fields.SelectorFromSet(fields.Set{"involvedObject.uid": string(s.UID)})
	if err := live.List(ctx, &evs, client.InNamespace(s.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("reading Karpenter's nominations of pod %s/%s: %w", s.Namespace, s.Name, err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, NominatedIn(e)...)
	}
	return out, nil
}

// NominatedIn are the NodeClaims one Event names when it is Karpenter's Nominated Event (the
// pod should schedule on them), and nothing for any other Event.
func NominatedIn(e corev1.Event) []string {
	if e.Reason != nominatedReason {
		return nil
	}
	var out []string
	for _, part := range strings.Split(strings.TrimPrefix(e.Message, "Pod should schedule on: "), ",") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(part), nodeClaimRef); ok && name != "" {
			out = append(out, name)
		}
	}
	return out
}

// usedByOthers reports whether a pod other than the seats in ours and DaemonSet pods is bound
// to the NodeClaim's node (one without a node has none).
func usedByOthers(ctx context.Context, live client.Reader, nc *karpv1.NodeClaim, ours map[types.UID]bool) (bool, error) {
	if nc.Status.NodeName == "" {
		return false, nil
	}
	var pods corev1.PodList
	sel := fields.SelectorFromSet(fields.Set{"spec.nodeName": nc.Status.NodeName})
	if err := live.List(ctx, &pods, client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return true, fmt.Errorf("listing the pods on node %s: %w", nc.Status.NodeName, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ours[p.UID] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || daemon(p) {
			continue
		}
		return true, nil
	}
	return false, nil
}

// daemon reports whether a DaemonSet runs p.
func daemon(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}
