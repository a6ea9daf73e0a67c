package admission

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// Volume topology: what a member's PersistentVolumeClaims (and generic ephemeral volumes) say
// about where it may run, resolved here from the informer cache so that placement (pure) can
// treat it like node affinity. As kube-scheduler's VolumeBinding plugin does:
//
//   - a bound claim: its PersistentVolume's node affinity (an EBS volume's zone); none for
//     volumes without topology (EFS, FSx for Lustre, NFS);
//   - an unbound claim of a WaitForFirstConsumer StorageClass: the class's allowedTopologies
//     (none: the provisioner creates the volume where the member lands);
//   - an unbound claim of an Immediate class, a claim that does not exist yet (an ephemeral
//     volume's claim is created by kube-controller-manager shortly after its pod), or a claim
//     being deleted: the member waits, and says so.

// noProvisioner is the provisioner of StorageClasses for pre-created local volumes.
const noProvisioner = berthv1alpha1.NoProvisioner

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims;persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch

// claimNames are the PersistentVolumeClaims a pod's volumes use, by volume.
func claimNames(p *corev1.Pod) []string {
	var out []string
	for _, v := range p.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, p.Name+"-"+v.Name)
		}
	}
	return out
}

// volumeReader reads what resolving a claim needs; a client.Reader, or a map in tests.
type volumeReader interface {
	claim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error)
	volume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	class(ctx context.Context, name string) (*storagev1.StorageClass, error)
}

// volumeTopologies resolves the volume topology of every member that is not on a node yet and
// uses claims. Read errors other than a missing object are returned, joined; a member whose
// claims could not be read is left out (and so cannot be placed wrongly: see scheduling).
func volumeTopologies(ctx context.Context, rd volumeReader, members map[string][]*corev1.Pod) (map[string]scheduling.VolumeTopology, error) {
	out := map[string]scheduling.VolumeTopology{}
	var errs []error
	for _, ms := range members {
		for _, m := range ms {
			if m.Spec.NodeName != "" || len(claimNames(m)) == 0 {
				continue
			}
			vt, err := resolveVolumes(ctx, rd, m)
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %s/%s: %w", m.Namespace, m.Name, err))
				vt = scheduling.VolumeTopology{Blocked: "has volumes berth could not read: " + err.Error()}
			}
			out[scheduling.VolumeKey(m)] = vt
		}
	}
	return out, errors.Join(errs...)
}

// resolveVolumes is the topology of one pod's claims.
func resolveVolumes(ctx context.Context, rd volumeReader, p *corev1.Pod) (scheduling.VolumeTopology, error) {
	var vt scheduling.VolumeTopology
	for _, name := range claimNames(p) {
		sels, blocked, err := resolveClaim(ctx, rd, p.Namespace, name)
		if err != nil {
			return scheduling.VolumeTopology{}, err
		}
		if blocked != "" {
			return scheduling.VolumeTopology{Blocked: blocked}, nil
		}
		vt.Required = append(vt.Required, sels...)
	}
	return vt, nil
}

// resolveClaim is where one claim lets its pod run, or why the pod waits.
func resolveClaim(ctx context.Context, rd volumeReader, ns, name string) ([]corev1.NodeSelector, string, error) {
	key := ns + "/" + name
	pvc, err := rd.claim(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("waits for its PersistentVolumeClaim %s to be created", key), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading PersistentVolumeClaim %s: %w", key, err)
	case pvc.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("uses PersistentVolumeClaim %s, which is being deleted", key), nil
	}
	if pvc.Spec.VolumeName != "" {
		pv, err := rd.volume(ctx, pvc.Spec.VolumeName)
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Sprintf("uses PersistentVolumeClaim %s, bound to PersistentVolume %s that does not exist", key, pvc.Spec.VolumeName), nil
		case err != nil:
			return nil, "", fmt.Errorf("reading PersistentVolume %s: %w", pvc.Spec.VolumeName, err)
		}
		if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
			return nil, "", nil
		}
		return []corev1.NodeSelector{*pv.Spec.NodeAffinity.Required}, "", nil
	}
	className := ""
	if pvc.Spec.StorageClassName != nil {
		className = *pvc.Spec.StorageClassName
	}
	if className == "" {
		return nil, fmt.Sprintf("waits for PersistentVolumeClaim %s to be bound (it names no StorageClass, so no provisioner creates its volume)", key), nil
	}
	sc, err := rd.class(ctx, className)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("waits for PersistentVolumeClaim %s to be bound (its StorageClass %s does not exist)", key, className), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading StorageClass %s: %w", className, err)
	}
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return nil, fmt.Sprintf("waits for PersistentVolumeClaim %s to be bound (StorageClass %s binds Immediately)", key, className), nil
	}
	if sc.Provisioner == noProvisioner {
		return nil, fmt.Sprintf("uses PersistentVolumeClaim %s of StorageClass %s, which has no provisioner (pre-created local volumes); berth does not match such claims to volumes, so it cannot place the member", key, className), nil
	}
	return allowedTopologies(sc), "", nil
}

// allowedTopologies is a StorageClass's allowedTopologies as a node selector (terms ORed,
// expressions ANDed, as kube-scheduler reads them); none when the class allows everywhere.
func allowedTopologies(sc *storagev1.StorageClass) []corev1.NodeSelector {
	if len(sc.AllowedTopologies) == 0 {
		return nil
	}
	var sel corev1.NodeSelector
	for _, t := range sc.AllowedTopologies {
		var term corev1.NodeSelectorTerm
		for _, e := range t.MatchLabelExpressions {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
				Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: append([]string(nil), e.Values...),
			})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	return []corev1.NodeSelector{sel}
}

// cacheVolumes reads claims, volumes and classes from a client (the informer cache).
type cacheVolumes struct{ c client.Reader }

func (v cacheVolumes) claim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	var pvc corev1.PersistentVolumeClaim
	err := v.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc)
	return &pvc, err
}

func (v cacheVolumes) volume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	var pv corev1.PersistentVolume
	err := v.c.Get(ctx, types.NamespacedName{Name: name}, &pv)
	return &pv, err
}

func (v cacheVolumes) class(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	var sc storagev1.StorageClass
	err := v.c.Get(ctx, types.NamespacedName{Name: name}, &sc)
	return &sc, err
}
