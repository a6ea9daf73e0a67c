package warmseats

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/seat"
)

// Pull is how a warm seat makes its node pull the fleet's serving images.
type Pull string

const (
	// PullImageVolume mounts each image as an image volume (Kubernetes 1.35+, where the
	// ImageVolume feature is on by default, with a runtime that supports it: containerd 2.1+,
	// CRI-O 1.31+): the kubelet pulls the image and runs nothing of it.
	PullImageVolume Pull = "image-volume"
	// PullInitContainer runs each image as an init container with the command /bin/sh -c true:
	// any cluster, but the image needs a shell.
	PullInitContainer Pull = "init-container"
)

// Pulls lists the Pull modes.
func Pulls() []Pull { return []Pull{PullImageVolume, PullInitContainer} }

// Images are the distinct images of a pod template's containers and init containers, in order.
func Images(spec *corev1.PodSpec) []string {
	var out []string
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if c.Image != "" && !slices.Contains(out, c.Image) {
				out = append(out, c.Image)
			}
		}
	}
	return out
}

// SeatPod is the warm seat of ScaledObject so (in namespace ns) for replicas of template:
// seat.Pod's shape of one replica (its requests, host ports, node selector, tolerations, the
// seat PriorityClass) plus the template's required node affinity, runtime class, service
// account and image pull secrets (so the seat pulls what a replica would, as a replica would),
// and its images pulled as pull says, under berth's labels only — never the template's, which
// would make the workload's controller count the seat as a replica. The seat's name is
// generated; the template label holds TemplateHash of the result.
//
// Unlike a gang's seat, a warm seat is not do-not-disrupt: it holds headroom, not a batch a
// gang waits for, and a seat that lived as long as its fleet would keep its node from
// Karpenter's drift and expiry (an AMI update) for good. Karpenter moves it like any pod —
// onto the replacement node drift launched, or onto free room consolidation found — and the
// keeper creates it again there.
func SeatPod(ns, so string, template *corev1.PodTemplateSpec, pauseImage string, pull Pull) (*corev1.Pod, error) {
	replica := &corev1.Pod{Spec: *template.Spec.DeepCopy()}
	p := seat.Pod(replica, ns, "", pauseImage)
	delete(p.Annotations, karpv1.DoNotDisruptAnnotationKey)
	p.GenerateName = seatNamePrefix(so)
	p.Labels[berthv1alpha1.ComponentLabel] = berthv1alpha1.WarmSeatComponent
	p.Labels[berthv1alpha1.WarmSeatForLabel] = so
	spec := &template.Spec
	if na := spec.Affinity; na != nil && na.NodeAffinity != nil && na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.DeepCopy()}}
	}
	p.Spec.RuntimeClassName = spec.RuntimeClassName
	p.Spec.ServiceAccountName = spec.ServiceAccountName
	p.Spec.ImagePullSecrets = slices.Clone(spec.ImagePullSecrets)
	images := Images(spec)
	if len(images) == 0 {
		return nil, fmt.Errorf("the pod template of ScaledObject %s/%s names no image", ns, so)
	}
	for i, img := range images {
		name := "serving-" + strconv.Itoa(i)
		switch pull {
		case PullInitContainer:
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
				Name: name, Image: img, Command: []string{"/bin/sh", "-c", "true"},
				SecurityContext: p.Spec.Containers[0].SecurityContext.DeepCopy(),
			})
		default:
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				Image: &corev1.ImageVolumeSource{Reference: img, PullPolicy: corev1.PullIfNotPresent}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
				corev1.VolumeMount{Name: name, MountPath: "/images/" + name, ReadOnly: true})
		}
	}
	if p.Spec.AutomountServiceAccountToken == nil {
		p.Spec.AutomountServiceAccountToken = ptr.To(false)
	}
	h, err := TemplateHash(p)
	if err != nil {
		return nil, err
	}
	p.Labels[berthv1alpha1.WarmSeatTemplateLabel] = h
	return p, nil
}

// seatNamePrefix is the generateName of a ScaledObject's seats (the name cut so that the
// generated suffix fits).
func seatNamePrefix(so string) string {
	const maxPrefix = 63 - 5 - len("-warm-")
	if len(so) > maxPrefix {
		so = so[:maxPrefix]
	}
	return so + "-warm-"
}

// TemplateHash hashes a seat's spec: seats of equal hashes hold the same kind of node with the
// same images.
func TemplateHash(p *corev1.Pod) (string, error) {
	b, err := json.Marshal(p.Spec)
	if err != nil {
		return "", fmt.Errorf("hashing a warm seat's spec: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return strconv.FormatUint(h.Sum64(), 36), nil
}
