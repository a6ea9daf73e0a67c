package controllers

import (
	corev1 "k8s.io/api/core/v1"
)

// slimPod is the pod cache's transform: the controller caches every pod of the cluster (the
// capacity in use on every node), and keeps of each only what its controllers read. Kept:
// metadata (less managed fields and kubectl's last-applied copy), everything placement reads
// (requests and overhead, affinity, node selector, tolerations, topology spread, host ports,
// priority, scheduling gates, resource claims, the claims its volumes use) and the status less
// its container statuses. Dropped: the containers' command, arguments, environment, mounts,
// probes and lifecycle hooks, ephemeral containers, volumes that are no claim, and container
// statuses.
//
// The cache's pods are never written back whole: berth patches them (a merge patch is the
// difference between two slim copies, so nothing dropped here is touched) and reads a pod from
// the API server where it copies one (recreate.go).
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	// kubectl's copy of the whole applied manifest: often a pod's largest field. The object is
	// the informer's fresh decode, shared with nothing yet.
	delete(p.Annotations, corev1.LastAppliedConfigAnnotation)
	p.Spec.Containers = slimContainers(p.Spec.Containers)
	p.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	p.Spec.EphemeralContainers = nil
	p.Spec.Volumes = claimVolumes(p.Spec.Volumes)
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	return p, nil
}

// slimContainers keeps of each container what placement and seats read: its name, image,
// ports (host ports), resources, resize policy and restart policy (sidecars' requests count
// with the app's).
func slimContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return in
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{
			Name: c.Name, Image: c.Image, Ports: c.Ports, Resources: c.Resources,
			ResizePolicy: c.ResizePolicy, RestartPolicy: c.RestartPolicy, RestartPolicyRules: c.RestartPolicyRules,
		}
	}
	return out
}

// claimVolumes keeps the volumes that use a PersistentVolumeClaim (named, or generic ephemeral):
// the only ones placement resolves to a topology.
func claimVolumes(in []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range in {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Ephemeral != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: v.Ephemeral}})
		}
	}
	return out
}
