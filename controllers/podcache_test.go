package controllers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// fullPod is a member as a cluster holds it: everything placement reads, and what it does not
// (command, environment, probes, mounts, the service-account volume, kubectl's copy, managed
// fields, container statuses).
func fullPod() *corev1.Pod {
	p := builders.Pod("train-0", "ml").Member("train").Gated().GPU(8).Request(corev1.ResourceCPU, "40").
		InitContainer("proxy", "500m", true).HostPort(8471, corev1.ProtocolTCP, "").
		Tolerate("nvidia.com/gpu", "", corev1.TaintEffectNoSchedule).NodeAffinityIn("karpenter.k8s.aws/instance-family", "p5").
		Spread("topology.kubernetes.io/zone", 1, "app", "train").PVC("data", "train-data").Ephemeral("scratch", "gp3").
		Overhead(corev1.ResourceCPU, "250m").Obj()
	p.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: strings.Repeat("x", 4096), "team": "ml"}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		c.Command, c.Args = []string{"torchrun"}, []string{"--nproc-per-node=8"}
		c.Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: new("eight-gpus")}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ImageID: "sha256:abc", ContainerID: "containerd://abc"}}
	return p
}

func TestSlimPodKeepsWhatControllersRead(t *testing.T) {
	full := fullPod()
	out, err := slimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*corev1.Pod)
	if diff := cmp.Diff(scheduling.PodRequests(full), scheduling.PodRequests(slim)); diff != "" {
		t.Errorf("requests changed (-full +slim):\n%s", diff)
	}
	if diff := cmp.Diff(seat.Ports(full), seat.Ports(slim)); diff != "" {
		t.Errorf("host ports changed (-full +slim):\n%s", diff)
	}
	for name, same := range map[string]bool{
		"labels":                cmp.Equal(full.Labels, slim.Labels),
		"affinity":              cmp.Equal(full.Spec.Affinity, slim.Spec.Affinity),
		"tolerations":           cmp.Equal(full.Spec.Tolerations, slim.Spec.Tolerations),
		"topology spread":       cmp.Equal(full.Spec.TopologySpreadConstraints, slim.Spec.TopologySpreadConstraints),
		"scheduling gates":      cmp.Equal(full.Spec.SchedulingGates, slim.Spec.SchedulingGates),
		"resource claims":       cmp.Equal(full.Spec.ResourceClaims, slim.Spec.ResourceClaims),
		"conditions":            cmp.Equal(full.Status.Conditions, slim.Status.Conditions),
		"berth's gate is there": slim.Spec.SchedulingGates[0].Name == berthv1alpha1.SchedulingGate,
		"other annotations":     slim.Annotations["team"] == "ml",
	} {
		if !same {
			t.Errorf("%s not kept", name)
		}
	}
	var claims []string
	for _, v := range slim.Spec.Volumes {
		claims = append(claims, v.Name)
	}
	if diff := cmp.Diff([]string{"data", "scratch"}, claims); diff != "" {
		t.Errorf("volumes: only the claims' kept (-want +got):\n%s", diff)
	}
	c := slim.Spec.Containers[0]
	if c.Command != nil || c.Args != nil || c.Env != nil || c.VolumeMounts != nil || c.ReadinessProbe != nil {
		t.Errorf("container kept what no controller reads: %+v", c)
	}
	if _, ok := slim.Annotations[corev1.LastAppliedConfigAnnotation]; ok || slim.ManagedFields != nil || slim.Status.ContainerStatuses != nil {
		t.Error("kubectl's copy, managed fields or container statuses kept")
	}
}

// TestSlimPodPatchesTouchOnlyWhatChanged: berth writes cached pods only as merge patches between
// two slim copies, which must never carry a field the cache dropped (a patch that did would
// erase the member's command or volumes).
func TestSlimPodPatchesTouchOnlyWhatChanged(t *testing.T) {
	out, err := slimPod(fullPod())
	if err != nil {
		t.Fatal(err)
	}
	stored := out.(*corev1.Pod)
	next := stored.DeepCopy()
	next.Spec.SchedulingGates = nil
	next.Labels[berthv1alpha1.ReleaseLabel] = "key"
	next.Annotations["karpenter.sh/do-not-disrupt"] = "true"
	data, err := client.MergeFrom(stored).Data(next)
	if err != nil {
		t.Fatal(err)
	}
	var patch map[string]any
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	spec, _ := patch["spec"].(map[string]any)
	if _, gates := spec["schedulingGates"]; len(spec) != 1 || !gates {
		t.Errorf("the patch's spec is %v, want only schedulingGates", spec)
	}
	if _, ok := patch["status"]; ok {
		t.Errorf("the patch touches the status: %s", data)
	}
}
