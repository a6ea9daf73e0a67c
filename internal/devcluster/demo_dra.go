package devcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// Scene 6: GPUs through DRA (`berth dev up --dra`). A gang of two members, each claiming 8 L40S
// through a ResourceClaimTemplate with a CEL selector on the product, on a family with no
// nodes: berth's seats carry copies of the template, Karpenter — sizing claims against the
// devices each instance type's nodes publish — launches a node per seat in one batch, the nodes
// publish their GPUs as gpu.nvidia.com ResourceSlices, and the gang is released whole, each
// claim allocated by kube-scheduler to devices of its member's node. On a dev cluster started
// without --dra the scene says so and skips.
const (
	// draGroup is scene 6's PodGroup; draTemplate its members' claim template.
	draGroup    = "llm-dra"
	draTemplate = "l40s-x8"
	// draProduct is the GPU family its members claim: L40S, 8 a node on g6e.48xlarge.
	draProduct = "l40s"
	// draMembers is the gang's size.
	draMembers = 2
	// draTimeout bounds scene 6.
	draTimeout = 3 * time.Minute
)

// draScene plays scene 6 (see above).
func draScene(ctx context.Context, d *demo) error {
	c, p := d.c, d.p
	var dc resourcev1.DeviceClass
	switch err := c.Get(ctx, client.ObjectKey{Name: rig.DRADriver}, &dc); {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err): // no class, or no resource.k8s.io at all
		p.say("skipped: this dev cluster runs without DRA (start it with 'berth dev up --dra')")
		return nil
	case err != nil:
		return fmt.Errorf("reading DeviceClass %s: %w", rig.DRADriver, err)
	}
	sel := `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("l40s")`
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: draTemplate, Namespace: DemoNamespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: rig.DRADriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 8,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: sel}}},
			}}},
		}}},
	}
	if err := c.Create(ctx, tmpl); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceClaimTemplate %s: %w", tmpl.Name, err)
	}
	pg := demoGroup(draGroup, draMembers)
	pg.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
	pool := rig.GPUNodePoolName(draProduct)
	v := &provisionView{p: p, pg: pg, pool: pool, members: draMembers, boundAt: map[string]time.Time{}}
	stop, err := v.watch(ctx, c)
	if err != nil {
		return err
	}
	defer stop()
	if err := createGang(ctx, c, pg, func(name string) *corev1.Pod { return draPod(name, pool) }); err != nil {
		return err
	}
	p.say("created ResourceClaimTemplate %s (8 devices of DeviceClass %s where %s), PodGroup %s (minMember %d) and %d members claiming their GPUs from it; no %s node exists",
		draTemplate, rig.DRADriver, sel, pg.Name, draMembers, draMembers, draProduct)
	seen := map[string]bool{}
	if err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		if err := showSeatTemplates(ctx, c, p, pg, seen); err != nil {
			return false, err
		}
		return v.step(ctx, c)
	}); err != nil {
		return fmt.Errorf("gang %s not running whole within %s (%s): %w", draGroup, draTimeout, v.state(), err)
	}
	if err := showMemberClaims(ctx, c, p, pg); err != nil {
		return err
	}
	return v.summarize()
}

// draPod is a member claiming its GPUs from the scene's template, on pool.
func draPod(name, pool string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{appLabel: "llm-dra"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{karpv1.NodePoolLabelKey: pool},
			// DRA members request no nvidia.com/gpu, so nothing adds the GPU taint's toleration.
			Tolerations:    []corev1.Toleration{{Key: berthv1alpha1.GPUResource, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(draTemplate)}},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")},
					Claims:   []corev1.ResourceClaim{{Name: "gpus"}},
				},
			}},
		},
	}
}

// showSeatTemplates prints each copy of the template a seat of pg carries, once.
func showSeatTemplates(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup, seen map[string]bool) error {
	var ts resourcev1.ResourceClaimTemplateList
	if err := c.List(ctx, &ts, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)}); err != nil {
		return fmt.Errorf("listing the seats' claim templates: %w", err)
	}
	for _, t := range ts.Items {
		if seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		owner := "?"
		if len(t.OwnerReferences) > 0 {
			owner = t.OwnerReferences[0].Name
		}
		p.say("  seat %s carries ResourceClaimTemplate %s/%s, a copy of %s/%s (Karpenter sizes the seat's claim against each instance type's devices)", owner, t.Namespace, t.Name, DemoNamespace, draTemplate)
	}
	return nil
}

// showMemberClaims prints where each member's claim was allocated.
func showMemberClaims(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup) error {
	var ms corev1.PodList
	if err := c.List(ctx, &ms, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		return fmt.Errorf("listing the members of %s: %w", pg.Name, err)
	}
	for _, m := range ms.Items {
		for _, st := range m.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			var claim resourcev1.ResourceClaim
			if err := c.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: *st.ResourceClaimName}, &claim); err != nil {
				return fmt.Errorf("reading member %s's claim: %w", m.Name, err)
			}
			where := "not allocated"
			if a := claim.Status.Allocation; a != nil && len(a.Devices.Results) > 0 {
				where = fmt.Sprintf("%d devices of %s in pool %s", len(a.Devices.Results), a.Devices.Results[0].Driver, a.Devices.Results[0].Pool)
			}
			p.say("  member %s on %s: claim %s allocated %s", m.Name, m.Spec.NodeName, claim.Name, where)
		}
	}
	return nil
}
