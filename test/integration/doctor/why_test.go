package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/why"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestWhy: `berth why` reads a real gang through kubectl's flags (-n, --kubeconfig) and says
// what it waits for — members that do not exist yet and a quota the waiting ones would pass —
// as text and as JSON.
func TestWhy(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "why")
	if err := c.Create(ctx, builders.PodGroup("train", ns).MinMember(3).Obj()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"train-0", "train-1"} {
		if err := c.Create(ctx, builders.Pod(name, ns).Member("train").GPU(8).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("8")}}}
	if err := c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		root := cli.NewRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"why", "train", "--namespace", ns, "--kubeconfig=" + rigtest.Current().Kubeconfig}, args...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("berth why: %v\n%s", err, out.String())
		}
		return out.String()
	}
	var ex why.Explanation
	if err := json.Unmarshal([]byte(run("-o", "json")), &ex); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(ex.Summary, "\n")
	// The quota controller fills the quota's status asynchronously: the members line is
	// what is certain at once.
	if !strings.Contains(got, "waiting for members: 2 of minMember 3 exist") || len(ex.Members) != 2 || ex.Members[0].GPUs != 8 {
		t.Errorf("explanation %+v", ex)
	}
	if text := run(); !strings.Contains(text, "PodGroup "+ns+"/train: Pending (minMember 3)") || !strings.Contains(text, "train-1") {
		t.Errorf("text:\n%s", text)
	}
	if name := run("-o", "name"); name != "podgroup.scheduling.berth.dev/train\n" {
		t.Errorf("-o name: %q", name)
	}
	if wide := run("-o", "wide"); !strings.Contains(wide, "quota") || !strings.Contains(wide, "requests.nvidia.com/gpu") {
		t.Errorf("-o wide:\n%s", wide)
	}
	// kubectl's templates: one custom-columns row per member, jsonpath over the whole report.
	cols := strings.Split(strings.TrimSpace(run("-o", "custom-columns=MEMBER:.name,STATE:.state,GPUS:.gpus", "--no-headers")), "\n")
	if len(cols) != 2 || strings.Join(strings.Fields(cols[0]), " ") != ex.Members[0].Name+" "+ex.Members[0].State+" 8" {
		t.Errorf("-o custom-columns --no-headers: %q", cols)
	}
	if jp := run("-o", "jsonpath={.minMember}"); jp != "3\n" {
		t.Errorf("-o jsonpath={.minMember}: %q", jp)
	}
}
