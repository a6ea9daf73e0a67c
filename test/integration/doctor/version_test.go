package doctor_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestVersionShowsTheCluster: `berth version` (and kubectl berth version) shows the client, the
// cluster's Kubernetes version and the berth controller installed in it, as the chart labels it.
func TestVersionShowsTheCluster(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	labels := map[string]string{"app.kubernetes.io/name": "berth", "app.kubernetes.io/component": "controller", "app.kubernetes.io/version": "v0.1.0"}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "berth-version"}}); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-controller", Namespace: "berth-version", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "berth-version"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "berth-version"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "ghcr.io/berth-dev/berth:v0.1.0"}}},
			},
		},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	root := cli.NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"version", "--kubeconfig=" + rigtest.Current().Kubeconfig})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("version: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"client: berth ", "kubernetes: v1.", "berth controller berth-version/berth-controller: v0.1.0 (ghcr.io/berth-dev/berth:v0.1.0)"} {
		if !strings.Contains(got, want) {
			t.Errorf("version output lacks %q:\n%s", want, got)
		}
	}
}
