// Package chart_test hands every object berth's Helm chart renders — with the default values
// and with every option on — to a real kube-apiserver as a server-side dry-run apply with
// strict field validation, with berth's, Karpenter's (and Karpenter AWS's), KEDA's, Prometheus
// Operator's and cert-manager's CRDs installed: what `helm install` would send is accepted.
package chart_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/chart"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.InstallBerthCRDs(ctx, r); err != nil {
			return err
		}
		if err := rigtest.InstallToolCRDs(ctx, r, rigtest.CRDsKEDA, rigtest.CRDsMonitoring, rigtest.CRDsCertManager); err != nil {
			return err
		}
		if err := rigtest.InstallKarpenterAWSCRDs(ctx, r); err != nil {
			return err
		}
		// The rig creates berth's namespace (rig.BerthNamespace) with the cluster's own; the
		// release's must exist either way.
		if err := r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chart.Release.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
}

func TestChartObjectsAcceptedByAPIServer(t *testing.T) {
	extraVol := []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "corp-ca"}}}
	extraMount := []any{map[string]any{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}}
	full := map[string]any{
		"webhook": map[string]any{"certManager": map[string]any{"enabled": true}},
		"scaler": map[string]any{"tls": map[string]any{"enabled": true, "existingSecret": "berth-scaler-tls", "mutual": true},
			"strategy": map[string]any{"type": "Recreate"}, "extraVolumes": extraVol, "extraVolumeMounts": extraMount},
		"agent": map[string]any{"runtimeClassName": "nvidia", "gpuAccess": "volumeMounts", "nodeSelector": map[string]any{"karpenter.sh/nodepool": "gpu"},
			"updateStrategy": map[string]any{"type": "OnDelete"}, "extraVolumes": extraVol, "extraVolumeMounts": extraMount},
		"controller": map[string]any{"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": 0, "maxSurge": 1}},
			"extraVolumes": extraVol, "extraVolumeMounts": extraMount,
			"livenessProbe": map[string]any{"periodSeconds": 30, "failureThreshold": 6}, "readinessProbe": map[string]any{"timeoutSeconds": 3}},
		"networkPolicy": map[string]any{"enabled": true, "webhookFrom": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/16"}}},
			"extraIngress": map[string]any{"agent": []any{map[string]any{"ports": []any{map[string]any{"port": 6060}}}}}},
		"commonLabels":         map[string]any{"cost-center": "ml-platform"},
		"revisionHistoryLimit": 3,
		"extraObjects":         []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "{{ .Release.Name }}-extra"}}},
		"monitoring": map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "scrapeTimeout": "20s", "sampleLimit": 50000,
				"relabelings":       []any{map[string]any{"targetLabel": "team", "replacement": "ml-platform"}},
				"metricRelabelings": []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_gc_.*", "action": "drop"}}},
			"prometheusRule": map[string]any{"enabled": true, "additionalRuleLabels": map[string]any{"cluster": "prod-use1"}, "seriesSelector": `cluster="prod-use1"`,
				"disabled": map[string]any{"BerthGPUDegraded": true}, "overrides": map[string]any{"BerthGangPendingTooLong": map[string]any{"for": "30m"}}},
			"dashboard": map[string]any{"enabled": true},
		},
		"nodePools": map[string]any{"clusterName": "prod", "families": map[string]any{
			"h100": map[string]any{"enabled": true, "capacityTypes": []any{"reserved", "on-demand"},
				"capacityReservationIDs": []any{"cr-0123456789abcdef0"}, "capacityReservationTags": map[string]any{"team": "ml"}},
			"h200": map[string]any{"enabled": true}, "a100": map[string]any{"enabled": true},
			"l40s": map[string]any{"enabled": true}, "a10g": map[string]any{"enabled": true}, "l4": map[string]any{"enabled": true},
		}},
	}
	ctx := context.Background()
	c := rigtest.Current().Client
	for name, values := range map[string]map[string]any{"default": nil, "full": full} {
		t.Run(name, func(t *testing.T) {
			objs, err := chart.RenderList(values)
			if err != nil {
				t.Fatal(err)
			}
			// helm test's objects too: the API must take them when helm test creates them.
			hooks, err := chart.Hooks(values)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, hooks...)
			checked := 0
			for _, o := range objs {
				u := &unstructured.Unstructured{Object: o}
				if u.GetNamespace() == "" && isNamespaced(u.GetKind()) {
					u.SetNamespace(chart.Release.Namespace)
				}
				err := c.Patch(ctx, u, client.Apply, client.FieldOwner("helm"), client.ForceOwnership, //nolint:staticcheck // SSA of unstructured objects
					client.DryRunAll, client.FieldValidation("Strict"))
				if err != nil {
					t.Errorf("%s %s rejected: %v", u.GetKind(), u.GetName(), err)
				}
				checked++
			}
			if checked < 20 {
				t.Errorf("only %d objects checked", checked)
			}
			t.Logf("%d objects accepted", checked)
		})
	}
}

func isNamespaced(kind string) bool {
	switch kind {
	case "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "MutatingWebhookConfiguration", "PriorityClass", "NodePool", "EC2NodeClass", "Namespace":
		return false
	}
	return true
}
