package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Members berth deletes (a gang restarted whole, a member stranded where it was released) are
// marked first with the condition DisruptionTarget=True — as kube-scheduler's preemption, the
// taint manager and the Eviction API mark the pods they delete — so the Job controller's pod
// failure policy can ignore the deletion: without it, a Job counts every pod berth deletes as a
// failure against its backoffLimit (one lost rank of an 8-rank Job restarted whole is 8).

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

// disrupt marks member p a disruption target (reason, message) and deletes it, both at the
// preconditions pre: its UID, and its resourceVersion when pre has one (the mark is then a
// write at that version, and the deletion one at the version the mark left). A member already
// gone, or replaced by another pod of its name, is no error; a refused resourceVersion is
// returned (apierrors.IsConflict) for the caller to judge. A mark whose deletion is refused is
// taken back: the member lives on, and is no disruption target.
func (r *Reconciler) disrupt(ctx context.Context, p *corev1.Pod, reason, message string, pre client.Preconditions) error {
	rv := ""
	if pre.ResourceVersion != nil {
		rv = *pre.ResourceVersion
	}
	marked, err := r.setDisruptionTarget(ctx, p, rv, []corev1.PodCondition{{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(r.clock.Now()),
	}})
	switch {
	case apierrors.IsNotFound(err):
		return nil // gone
	case apierrors.IsInvalid(err):
		// Another pod of that name refuses the UID; anything else invalid is an error, or
		// the member would live on unmarked and undeleted with nothing said.
		if gone, getErr := r.replacedOrGone(ctx, p); gone || getErr != nil {
			return errors.Join(getErr)
		}
		return err
	case err != nil:
		return err
	}
	if pre.ResourceVersion != nil {
		pre.ResourceVersion = &marked
	}
	err = r.client.Delete(ctx, p, pre)
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		_, undo := r.setDisruptionTarget(ctx, p, "", []map[string]any{{"type": corev1.DisruptionTarget, "$patch": "delete"}})
		if undo != nil && !apierrors.IsNotFound(undo) {
			return errors.Join(err, fmt.Errorf("taking back the DisruptionTarget condition of member %s, which lives on: %w", p.Name, undo))
		}
		return err
	default:
		return fmt.Errorf("deleting member %s: %w", p.Name, err)
	}
}

// setDisruptionTarget patches p's status conditions with a strategic merge patch (the other
// conditions, and the kubelet's, stay as they are) and returns the pod's new resourceVersion.
// The patch carries p's UID, so a pod recreated under the name refuses it (a UID cannot
// change), and rv when it is set, so a pod changed since is refused too (a conflict).
func (r *Reconciler) setDisruptionTarget(ctx context.Context, p *corev1.Pod, rv string, conditions any) (string, error) {
	meta := map[string]any{"uid": p.UID}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta, "status": map[string]any{"conditions": conditions}})
	if err != nil {
		return "", fmt.Errorf("encoding the DisruptionTarget condition of member %s: %w", p.Name, err)
	}
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
	if err := r.client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return "", fmt.Errorf("patching the DisruptionTarget condition of member %s: %w", p.Name, err)
	}
	return target.ResourceVersion, nil
}

// replacedOrGone reports whether member p no longer exists as the pod berth looked at: deleted,
// or another pod under its name.
func (r *Reconciler) replacedOrGone(ctx context.Context, p *corev1.Pod) (bool, error) {
	var cur corev1.Pod
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(p), &cur); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading member %s: %w", p.Name, err)
	}
	return cur.UID != p.UID, nil
}
