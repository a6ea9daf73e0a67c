package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
)

// Install check names.
const (
	CheckInstallCRD     = "berth-crd"
	CheckInstallWebhook = "berth-webhook"
	CheckInstallLeader  = "berth-leader"
	CheckInstallAgent   = "berth-agent"
)

// InstallChecks are the names of the install checks (what --install --skip takes).
func InstallChecks() []string {
	return []string{CheckInstallCRD, CheckInstallWebhook, CheckInstallLeader, CheckInstallAgent}
}

// AgentStale is how long after the agent's last report a GPU node counts as unwatched: the
// agent reports every 30 s, so ten missed reports.
const AgentStale = 5 * time.Minute

// podGroupCRD is the PodGroup CRD's name.
const podGroupCRD = "podgroups." + "scheduling.berth.dev"

// selfCheckGroup names the PodGroup the dry-run member claims (it need not exist: the webhook
// gates by label).
const selfCheckGroup = "berth-doctor-self-check"

// Install checks berth's own install in namespace (where the chart put it): the PodGroup CRD
// serves the version this berth speaks; the pod-gate webhook answers the API server with a
// certificate its CA bundle trusts — proven by a server-side dry run of a gang member, which
// must come back gated; a controller replica holds the leader Lease and renews it; and berth's
// agent reports on every GPU node. Nothing is created. A check berth may not run (Forbidden) is
// skipped, as is one named in skip; now is the clock the Lease and the agent's reports are
// read against.
func Install(ctx context.Context, c client.Client, namespace string, now time.Time, skip ...string) (Report, error) {
	var r Report
	var errs []error
	type installCheck struct {
		name string
		run  func() ([]Finding, string, error)
	}
	for _, ch := range []installCheck{
		{CheckInstallCRD, func() ([]Finding, string, error) { return crdCheck(ctx, c) }},
		{CheckInstallWebhook, func() ([]Finding, string, error) { return webhookCheck(ctx, c, namespace) }},
		{CheckInstallLeader, func() ([]Finding, string, error) { return leaderCheck(ctx, c, namespace, now) }},
		{CheckInstallAgent, func() ([]Finding, string, error) { return agentCheck(ctx, c, now) }},
	} {
		if slices.Contains(skip, ch.name) {
			r.Skipped = append(r.Skipped, Skipped{Check: ch.name, Reason: "skipped on request (--skip)"})
			continue
		}
		fs, skipped, err := ch.run()
		switch {
		case err != nil:
			errs = append(errs, err)
		case skipped != "":
			r.Skipped = append(r.Skipped, Skipped{Check: ch.name, Reason: skipped})
			r.Incomplete = true
		default:
			r.Findings = append(r.Findings, fs...)
		}
	}
	return r, errors.Join(errs...)
}

// leaderCheck finds no controller replica leading: the Lease missing (no replica ever ran in
// this namespace), released, or not renewed within its duration (every replica is down or cut
// off from the API server). Without a leader no gang is admitted and no gate released.
func leaderCheck(ctx context.Context, c client.Client, namespace string, now time.Time) ([]Finding, string, error) {
	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: namespace, Name: controllers.LeaderElectionID}
	object := "Lease " + namespace + "/" + key.Name
	err := c.Get(ctx, key, &lease)
	switch {
	case apierrors.IsForbidden(err):
		return nil, fmt.Sprintf("cannot get %s (forbidden)", object), nil
	case apierrors.IsNotFound(err):
		return []Finding{{Check: CheckInstallLeader, Object: object,
			Problem: fmt.Sprintf("no controller replica has ever led in %s: no gang is admitted and no gated member released", namespace),
			Fix:     "check the controller Deployment's pods (kubectl -n " + namespace + " get pods -l app.kubernetes.io/component=controller) and that -n names berth's namespace"}}, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading %s: %w", object, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	duration := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 15)) * time.Second
	var renewed time.Time
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	}
	switch {
	case holder == "":
		return []Finding{{Check: CheckInstallLeader, Object: object,
			Problem: "no controller replica leads (the last leader released the Lease and none took it): no gang is admitted and no gated member released",
			Fix:     "check the controller pods are running and Ready; their logs say why they do not acquire the Lease"}}, "", nil
	case now.Sub(renewed) > duration:
		return []Finding{{Check: CheckInstallLeader, Object: object,
			Problem: fmt.Sprintf("the leader %s last renewed the Lease %s ago (it lasts %s): no replica leads, so no gang is admitted and no gated member released", holder, now.Sub(renewed).Round(time.Second), duration),
			Fix:     "check the controller pods: crashed, evicted, or unable to reach the API server (their logs; berth_controller up); a new leader takes the Lease once it expires"}}, "", nil
	}
	return nil, "", nil
}

// agentCheck finds GPU nodes (allocatable nvidia.com/gpu, or of a DRA pool) where berth's agent has not reported
// within AgentStale: their GPU faults are not seen, and gangs are placed on failed GPUs.
func agentCheck(ctx context.Context, c client.Client, now time.Time) ([]Finding, string, error) {
	var nodes corev1.NodeList
	err := c.List(ctx, &nodes)
	switch {
	case apierrors.IsForbidden(err):
		return nil, "cannot list Nodes (forbidden)", nil
	case err != nil:
		return nil, "", fmt.Errorf("listing nodes: %w", err)
	}
	mounted, err := agentMountsDeviceList(ctx, c)
	if err != nil {
		return nil, "", err
	}
	var out []Finding
	for _, n := range nodes.Items {
		q, ok := n.Status.Allocatable[berthv1alpha1.GPUResource]
		dra := n.Labels[berthv1alpha1.GPUAllocationLabel] == berthv1alpha1.GPUAllocationDRA
		if (!ok || q.IsZero()) && !dra { // a DRA node's GPUs are ResourceSlices, not allocatable
			continue
		}
		var last time.Time
		for _, cond := range n.Status.Conditions {
			if cond.Type == berthv1alpha1.NodeConditionGPUDegraded {
				last = cond.LastHeartbeatTime.Time
			}
		}
		var problem string
		switch {
		case last.IsZero():
			problem = "GPU node with no report from berth's agent (no GPUDegraded condition): its GPU faults are not seen, and gangs may be placed on failed GPUs"
		case now.Sub(last) > AgentStale:
			problem = fmt.Sprintf("berth's agent last reported on this GPU node %s ago: its GPU faults are not seen, and gangs may be placed on failed GPUs", now.Sub(last).Round(time.Second))
		default:
			continue
		}
		fix := "check the agent DaemonSet's pod on the node (its nodeSelector and tolerations must match the node; kubectl get pods -o wide -l app.kubernetes.io/component=agent); --skip " + CheckInstallAgent + " where the agent is not installed by choice"
		switch {
		case isBottlerocket(n) && !mounted:
			problem += "; the node runs Bottlerocket, whose NVIDIA runtime gives an unprivileged container no GPU and no NVML for NVIDIA_VISIBLE_DEVICES"
			fix = "install the chart with agent.gpuAccess=volumeMounts (the device-list mount Bottlerocket's runtime accepts; a hostPath volume, so the namespace needs Pod Security level privileged; docs/agent.md), then " + fix
		case isBottlerocket(n):
			fix = "the agent already asks for the GPUs with the device-list mount (agent.gpuAccess=volumeMounts): check that its namespace's Pod Security level admits hostPath volumes (privileged) and that the node's settings.kubernetes.nvidia.container-runtime.visible-devices-as-volume-mounts is true (Bottlerocket's default); then " + fix
		}
		out = append(out, Finding{Check: CheckInstallAgent, Object: "Node " + n.Name, Problem: problem, Fix: fix})
	}
	return out, "", nil
}

// deviceListMount is where agent.gpuAccess=volumeMounts mounts /dev/null: the NVIDIA runtime's
// device list for every GPU.
const deviceListMount = "/var/run/nvidia-container-devices/all"

// agentMountsDeviceList reports whether a DaemonSet of berth's agent (its component label)
// mounts the NVIDIA runtime's device list; false where DaemonSets may not be listed.
func agentMountsDeviceList(ctx context.Context, c client.Client) (bool, error) {
	var dss appsv1.DaemonSetList
	err := c.List(ctx, &dss, client.MatchingLabels{berthv1alpha1.ComponentLabel: "agent"})
	switch {
	case apierrors.IsForbidden(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("listing the agent's DaemonSets: %w", err)
	}
	for _, ds := range dss.Items {
		for _, ctr := range ds.Spec.Template.Spec.Containers {
			if slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == deviceListMount }) {
				return true, nil
			}
		}
	}
	return false, nil
}

// isBottlerocket reports whether n runs Bottlerocket (its kubelet's OS image, "Bottlerocket OS
// 1.x (aws-k8s-1.3x-nvidia)").
func isBottlerocket(n corev1.Node) bool {
	return strings.HasPrefix(n.Status.NodeInfo.OSImage, "Bottlerocket")
}

// crdCheck finds a missing PodGroup CRD, or one that does not serve v1alpha1.
func crdCheck(ctx context.Context, c client.Client) ([]Finding, string, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	err := c.Get(ctx, client.ObjectKey{Name: podGroupCRD}, &crd)
	switch {
	case apierrors.IsForbidden(err):
		return nil, "cannot get CustomResourceDefinitions (forbidden)", nil
	case apierrors.IsNotFound(err):
		return []Finding{{Check: CheckInstallCRD, Object: "CustomResourceDefinition " + podGroupCRD,
			Problem: "the PodGroup CRD is not installed: no gang can be declared",
			Fix:     "install berth's chart (crds.install: true, the default, installs and upgrades it) or kubectl apply --server-side -f config/crd/bases/"}}, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading the PodGroup CRD: %w", err)
	}
	served := slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == berthv1alpha1.GroupVersion.Version && v.Served
	})
	if !served {
		return []Finding{{Check: CheckInstallCRD, Object: "CustomResourceDefinition " + podGroupCRD,
			Problem: fmt.Sprintf("the PodGroup CRD does not serve %s, the version this berth reads and writes", berthv1alpha1.GroupVersion.Version),
			Fix:     "apply the CRD of this berth release before upgrading the controller: helm upgrade (the chart upgrades it) or kubectl apply --server-side -f config/crd/bases/"}}, "", nil
	}
	return nil, "", nil
}

// webhookCheck dry-runs a gang member: the API server calls berth's webhook (dry runs reach
// webhooks without side effects), so an unreachable Service, a Service without endpoints or a
// CA bundle that does not trust the serving certificate all come back as the error, and a
// webhook that answered without gating is a finding too.
func webhookCheck(ctx context.Context, c client.Client, namespace string) ([]Finding, string, error) {
	obj := "MutatingWebhookConfiguration " + gate.ConfigurationName
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	switch err := c.Get(ctx, client.ObjectKey{Name: gate.ConfigurationName}, &cfg); {
	case apierrors.IsNotFound(err):
		return []Finding{{Check: CheckInstallWebhook, Object: obj,
			Problem: "berth's pod-gate webhook is not registered: gang members are created without the gate and placed one by one",
			Fix:     "install or upgrade the chart (helm upgrade restores it), or undo an emergency removal (docs/runbooks/emergency.md)"}}, "", nil
	case err != nil && !apierrors.IsForbidden(err):
		return nil, "", fmt.Errorf("reading %s: %w", obj, err)
	case err == nil:
		for _, w := range cfg.Webhooks {
			if w.ClientConfig.Service != nil && len(w.ClientConfig.CABundle) == 0 {
				return []Finding{{Check: CheckInstallWebhook, Object: obj,
					Problem: fmt.Sprintf("webhook %s has no caBundle: the API server cannot trust berth's certificate", w.Name),
					Fix:     "the controller injects it at start (or cert-manager's CA injector does); check the controller's logs and restart it"}}, "", nil
			}
		}
	}
	member := selfCheckMember(namespace)
	err := c.Create(ctx, member, client.DryRunAll)
	switch {
	case apierrors.IsForbidden(err) && !isWebhookError(err):
		return nil, fmt.Sprintf("cannot create pods in %s, even as a dry run: %v", namespace, err), nil
	case err != nil && !strings.Contains(err.Error(), berthWebhookSuffix):
		// Refused by something else (another admission webhook or policy, a quota, the API
		// server): berth's webhook was not proven either way.
		return nil, fmt.Sprintf("a gang member's dry run in %s was refused before berth's webhook could be checked: %v", namespace, err), nil
	case err != nil:
		return []Finding{{Check: CheckInstallWebhook, Object: obj,
			Problem: fmt.Sprintf("a gang member's dry run in %s failed at berth's webhook: %v", namespace, err),
			Fix:     "check the controller pods are Ready and the webhook Service has endpoints (kubectl get endpointslices -l kubernetes.io/service-name=<release>-webhook); an x509 error means the caBundle does not match the serving certificate — restart the controller to re-issue and re-inject it"}}, "", nil
	}
	if !slices.ContainsFunc(member.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == berthv1alpha1.SchedulingGate }) {
		return []Finding{{Check: CheckInstallWebhook, Object: obj,
			Problem: fmt.Sprintf("a gang member's dry run in %s came back without berth's scheduling gate: the webhook did not gate it", namespace),
			Fix:     "check the webhook's objectSelector and namespaceSelector (helm get manifest) and that the namespace is not excluded"}}, "", nil
	}
	return nil, "", nil
}

// berthWebhookSuffix ends the names of berth's webhooks (berth.gate.scheduling.berth.dev), which
// the API server names in the errors of calling them.
const berthWebhookSuffix = "gate.scheduling.berth.dev"

// selfCheckMember is the gang member the install check dry-runs: restricted pod security and
// small requests and limits, so Pod Security admission and quotas take it like any pod.
func selfCheckMember(namespace string) *corev1.Pod {
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "berth-doctor-", Namespace: namespace,
			Labels: map[string]string{berthv1alpha1.PodGroupLabel: selfCheckGroup}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "check", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: small, Limits: small},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
}

// isWebhookError reports whether err came from calling an admission webhook rather than from
// the caller's own permissions.
func isWebhookError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "admission webhook") || strings.Contains(msg, "calling webhook")
}
