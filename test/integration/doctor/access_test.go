package doctor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/test/rigtest"
)

// limitedKubeconfig is a kubeconfig for a ServiceAccount that may list everything doctor reads
// but HorizontalPodAutoscalers.
func limitedKubeconfig(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doctor-access"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "limited", Namespace: ns.Name}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "doctor-limited"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list"}},
		{APIGroups: []string{"karpenter.sh"}, Resources: []string{"nodepools"}, Verbs: []string{"list"}},
		{APIGroups: []string{"karpenter.k8s.aws"}, Resources: []string{"ec2nodeclasses"}, Verbs: []string{"list"}},
		{APIGroups: []string{"keda.sh"}, Resources: []string{"scaledobjects"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses"}, Verbs: []string{"list"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "doctor-limited"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns.Name}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(r.Config)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(r.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rig"] = cluster
	cfg.AuthInfos["limited"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["limited"] = &clientcmdapi.Context{Cluster: "rig", AuthInfo: "limited"}
	cfg.CurrentContext = "limited"
	path := filepath.Join(t.TempDir(), "limited.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDoctorWithoutAccess: a check whose objects the caller may not list is skipped with a
// note and the run exits 2 (could not check everything); the checks it can run still run.
// --skip leaves checks out on purpose, which is not incomplete; errors exit 2.
func TestDoctorWithoutAccess(t *testing.T) {
	kubeconfig := limitedKubeconfig(t)
	run := func(args ...string) (string, int) {
		t.Helper()
		root := cli.NewRootCommand()
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"doctor", "--kubeconfig=" + kubeconfig}, args...))
		err := root.ExecuteContext(context.Background())
		code := 0
		var coded interface{ ExitCode() int }
		switch {
		case errors.As(err, &coded):
			code = coded.ExitCode()
		case err != nil:
			code = 1
		}
		if got := cli.Execute(append([]string{"doctor", "--kubeconfig=" + kubeconfig}, args...)); got != code {
			t.Errorf("doctor %v: Execute exits %d, the command's error says %d", args, got, code)
		}
		if err != nil && code == 2 && out.Len() == 0 {
			return err.Error(), code // what Execute prints to stderr
		}
		return out.String(), code
	}
	out, code := run("-n", "doctor-access", "-o", "json")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	skipped := map[string]string{}
	for _, s := range rep.Skipped {
		skipped[s.Check] = s.Reason
	}
	if code != 2 || !rep.Incomplete || len(rep.Findings) != 0 ||
		skipped[doctor.CheckGPUUtilScaling] != "cannot list HorizontalPodAutoscaler (forbidden)" ||
		skipped[doctor.CheckVLLMWithoutScaler] != "cannot list HorizontalPodAutoscaler (forbidden)" ||
		skipped[doctor.CheckResourceScaling] != "cannot list HorizontalPodAutoscaler (forbidden)" || len(skipped) != 3 {
		t.Errorf("without HPA access: exit %d, report %s; want exit 2, the three HPA checks skipped as forbidden, the rest run", code, out)
	}
	text, _ := run("-n", "doctor-access")
	if !strings.Contains(text, "skipped gpu-util-autoscaling") || !strings.Contains(text, "cannot list HorizontalPodAutoscaler (forbidden)") {
		t.Errorf("text report does not say what was skipped:\n%s", text)
	}
	// Leaving the checks out on purpose: complete, clean, exit 0.
	if out, code := run("-n", "doctor-access", "--skip", doctor.CheckGPUUtilScaling+","+doctor.CheckVLLMWithoutScaler+","+doctor.CheckResourceScaling); code != 0 {
		t.Errorf("with the unreadable checks skipped: exit %d\n%s", code, out)
	}
	if out, code := run("--skip", "nope"); code != 2 || !strings.Contains(out, `"nope" is not a check`) {
		t.Errorf("--skip nope: exit %d\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "missing")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: \"https://127.0.0.1:1\"}\ncontexts:\n- name: x\n  context: {cluster: x}\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := cli.Execute([]string{"doctor", "--kubeconfig=" + bad}); code != 2 {
		t.Errorf("doctor against an unreachable API server exited %d, want 2", code)
	}
}
