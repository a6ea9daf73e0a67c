package doctor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
)

// TestInstallBlamesOnlyBerth: a dry run refused by something other than berth's webhook (a
// policy engine, a quota) proves nothing about berth — the check is skipped and says why — while
// a failure calling berth's webhook is a finding; the dry-run member passes restricted Pod
// Security and carries requests and limits.
func TestInstallBlamesOnlyBerth(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: podGroupCRD},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true}}}}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: gate.ConfigurationName}}
	gr := schema.GroupResource{Resource: "pods"}
	for _, tt := range []struct {
		name     string
		err      error
		finding  bool
		skipWord string
	}{
		{"berth's webhook unreachable", apierrors.NewInternalError(errors.New(`failed calling webhook "berth.gate.scheduling.berth.dev": connection refused`)), true, ""},
		{"a policy engine", apierrors.NewForbidden(gr, "", errors.New(`admission webhook "validate.kyverno.svc" denied the request`)), false, "refused before berth's webhook"},
		{"a quota", apierrors.NewForbidden(gr, "", errors.New("exceeded quota: compute")), false, "cannot create pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(crd, cfg).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					return tt.err
				},
			}).Build()
			r, err := Install(context.Background(), c, "ml", time.Now(), CheckInstallLeader, CheckInstallAgent)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(r.Findings) == 1 && r.Findings[0].Check == CheckInstallWebhook; got != tt.finding {
				t.Errorf("findings %+v, want a berth-webhook finding: %v", r.Findings, tt.finding)
			}
			if tt.skipWord != "" && (len(r.Skipped) != 3 || !strings.Contains(r.Skipped[0].Reason, tt.skipWord) || !r.Incomplete) {
				t.Errorf("skipped %+v (incomplete %v), want one naming %q", r.Skipped, r.Incomplete, tt.skipWord)
			}
		})
	}
	m := selfCheckMember("ml")
	sc := m.Spec.Containers[0].SecurityContext
	if m.Spec.SecurityContext == nil || !*m.Spec.SecurityContext.RunAsNonRoot || sc == nil || *sc.AllowPrivilegeEscalation ||
		m.Spec.Containers[0].Resources.Limits.Memory().IsZero() {
		t.Errorf("the dry-run member is not restricted or has no limits: %+v", m.Spec)
	}
}

// TestLeaderAndAgentChecks: a Lease renewed within its duration passes; missing, released or
// expired it is a finding. A GPU node passes with a fresh agent report; without one, or with a
// stale one, it is a finding; a node without GPUs is not checked.
func TestLeaderAndAgentChecks(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: controllers.LeaderElectionID, Namespace: "berth"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo)))}}
	}
	gpuNode := func(name string, reportedAgo time.Duration) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")}}}
		if reportedAgo >= 0 {
			n.Status.Conditions = []corev1.NodeCondition{{Type: berthv1alpha1.NodeConditionGPUDegraded, Status: corev1.ConditionFalse,
				LastHeartbeatTime: metav1.NewTime(now.Add(-reportedAgo))}}
		}
		return n
	}
	cpuNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}
	for _, tt := range []struct {
		name string
		objs []client.Object
		want []string
	}{
		{"led, every GPU node watched", []client.Object{lease("a", 5*time.Second), gpuNode("g1", 20*time.Second), cpuNode}, nil},
		{"no Lease", []client.Object{gpuNode("g1", 0)}, []string{"berth-leader Lease berth/" + controllers.LeaderElectionID}},
		{"released", []client.Object{lease("", time.Second)}, []string{"berth-leader Lease berth/" + controllers.LeaderElectionID}},
		{"expired", []client.Object{lease("a", time.Minute)}, []string{"berth-leader Lease berth/" + controllers.LeaderElectionID}},
		{"agent missing or stale", []client.Object{lease("a", 0), gpuNode("fresh", 0), gpuNode("never", -1), gpuNode("stale", 10*time.Minute), cpuNode},
			[]string{"berth-agent Node never", "berth-agent Node stale"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tt.objs...).Build()
			r, err := Install(context.Background(), c, "berth", now, CheckInstallCRD, CheckInstallWebhook)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Check+" "+f.Object)
			}
			if !slices.Equal(got, tt.want) || r.Incomplete {
				t.Errorf("findings %v (incomplete %v), want %v", got, r.Incomplete, tt.want)
			}
		})
	}
}

// TestAgentCheckNamesBottlerocket: a GPU node without the agent's report says why where the
// likely cause is the node's OS — Bottlerocket's NVIDIA runtime ignores NVIDIA_VISIBLE_DEVICES
// from the agent's unprivileged container — and only there.
func TestAgentCheckNamesBottlerocket(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gpuNode := func(name, osImage string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")},
			NodeInfo:    corev1.NodeSystemInfo{OSImage: osImage}}}
	}
	nodes := []client.Object{gpuNode("br", "Bottlerocket OS 1.26.1 (aws-k8s-1.33-nvidia)"), gpuNode("al2023", "Amazon Linux 2023.6.20250115")}
	mounting := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "berth-agent", Namespace: "berth-system",
		Labels: map[string]string{berthv1alpha1.ComponentLabel: "agent"}}}
	mounting.Spec.Template.Spec.Containers = []corev1.Container{{Name: "agent", VolumeMounts: []corev1.VolumeMount{{Name: "nvidia-all-gpus", MountPath: deviceListMount}}}}
	for _, tt := range []struct {
		name    string
		objs    []client.Object
		wantFix string
	}{
		{"the agent asks by environment", nodes, "install the chart with agent.gpuAccess=volumeMounts"},
		{"the agent already mounts the device list", append(slices.Clone(nodes), mounting), "Pod Security level admits hostPath"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			got, _, err := agentCheck(context.Background(), c, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("findings %+v, want one per unwatched GPU node", got)
			}
			for _, f := range got {
				named := strings.Contains(f.Fix, tt.wantFix)
				if want := f.Object == "Node br"; named != want {
					t.Errorf("%s: fix names %q: %v, want %v: %+v", f.Object, tt.wantFix, named, want, f)
				}
			}
		})
	}
}

// TestAgentCheckSeesDRANodes: a node of a DRA pool has no allocatable nvidia.com/gpu (its GPUs
// are ResourceSlices) and is still a GPU node the agent must watch; a CPU node is not.
func TestAgentCheckSeesDRANodes(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dra", Labels: map[string]string{berthv1alpha1.GPUAllocationLabel: berthv1alpha1.GPUAllocationDRA}}}
	cpu := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(dra, cpu).Build()
	got, _, err := agentCheck(context.Background(), c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Object != "Node dra" {
		t.Fatalf("findings %+v, want the DRA node's only", got)
	}
}
