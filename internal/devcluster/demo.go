package devcluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// DemoNamespace holds the demo's workloads.
const DemoNamespace = "berth-demo"

// appLabel is the plain label the demo's pods are selected by (app=<name>), as the pods of the
// vLLM Deployment are (vllmsim.Deployment).
const appLabel = "app"

// Scene is one scene of the demo: Name selects it (berth dev demo --scene NAME), Title opens it.
type Scene struct {
	Name, Title string
	// timeout bounds the scene. run plays it on the demo namespace as the reset, or the scenes
	// before it in the table, left it: a scene needs nothing from another.
	timeout time.Duration
	run     func(ctx context.Context, d *demo) error
}

// scenes are the demo's scenes, in the order it plays them; what each shows is told at the top
// of its file, demo_<name>.go.
var scenes = []Scene{
	{"training", "an 8-GPU training pod on a cluster with no GPU nodes", trainingTimeout, trainingScene},
	{"gang", "a 4-member gang (2 GPUs each) while the H100 node is busy", gangTimeout, gangScene},
	{"provision", "a 2-node gang (2 x 8 H200 GPUs, one zone) on a family with no nodes yet", provisionTimeout, provisionScene},
	{"guard", "the consolidation guard on a GPU NodePool that consolidates underutilized nodes", guardTimeout, guardScene},
	{"autoscale", "a vLLM Deployment sized by KEDA and berth's scaler from queue depth and KV-cache usage", autoscaleTimeout, autoscaleScene},
	{"dra", "a 2-node gang claiming 8 L40S each through DRA (berth dev up --dra) on a family with no nodes yet", draTimeout, draScene},
	{"lws", "a LeaderWorkerSet of 2-node groups (8 A100s a pod) scaled from 1 to 3 groups on load, each group admitted whole", lwsTimeout, lwsScene},
}

// Scenes are the demo's scenes in the order Demo plays them.
func Scenes() []Scene { return slices.Clone(scenes) }

// ListScenes writes one line per scene: its name and its title.
func ListScenes(w io.Writer) error {
	for _, s := range scenes {
		if _, err := fmt.Fprintf(w, "%-10s %s\n", s.Name, s.Title); err != nil {
			return fmt.Errorf("listing the scenes: %w", err)
		}
	}
	return nil
}

// CheckScenes fails, naming the scenes there are, when a name is not a scene's.
func CheckScenes(names ...string) error {
	_, err := pickScenes(names)
	return err
}

// pickScenes are the table positions of the named scenes, in table order; all of them when no
// name is given.
func pickScenes(names []string) ([]int, error) {
	want := map[string]bool{}
	for _, n := range names {
		if !slices.ContainsFunc(scenes, func(s Scene) bool { return s.Name == n }) {
			return nil, fmt.Errorf("no scene %q: the scenes are %s", n, strings.Join(sceneNames(), ", "))
		}
		want[n] = true
	}
	var out []int
	for i, s := range scenes {
		if len(want) == 0 || want[s.Name] {
			out = append(out, i)
		}
	}
	return out, nil
}

// sceneNames are the scenes' names in table order.
func sceneNames() []string {
	out := make([]string, len(scenes))
	for i, s := range scenes {
		out[i] = s.Name
	}
	return out
}

// demo is what a scene plays with: the dev cluster's client and the printer.
type demo struct {
	c client.WithWatch
	p *printer
}

// Demo plays the demo's scenes (all of them, or the named ones, in table order) against the dev
// cluster whose kubeconfig is given, after removing what an earlier run left, printing what
// happens as it happens.
func Demo(ctx context.Context, kubeconfig string, out io.Writer, names ...string) error {
	picked, err := pickScenes(names)
	if err != nil {
		return err
	}
	c, err := demoClient(kubeconfig)
	if err != nil {
		return err
	}
	d := &demo{c: c, p: &printer{out: out, start: time.Now()}}
	if err := resetDemo(ctx, c, d.p); err != nil {
		return err
	}
	for _, i := range picked {
		s := scenes[i]
		d.p.say("scene %d: %s", i+1, s.Title)
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := s.run(sctx, d)
		cancel()
		if err != nil {
			return fmt.Errorf("scene %d (%s): %w", i+1, s.Name, err)
		}
	}
	d.p.say("done in %s. Inspect with KUBECONFIG=%s; stop everything with 'berth dev down'",
		time.Since(d.p.start).Round(time.Second), kubeconfig)
	return nil
}

// demoClient is a client (with watch) for the dev cluster's kubeconfig.
func demoClient(kubeconfig string) (client.WithWatch, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w (is the dev cluster up? run 'berth dev up')", kubeconfig, err)
	}
	scheme, err := rig.NewScheme()
	if err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return c, nil
}

// printer prints lines stamped with the time since the demo started, and remembers what it
// printed so that a poll prints each change once.
type printer struct {
	out   io.Writer
	start time.Time
	// last is the value last printed under each key.
	last map[string]string
}

// say prints a line stamped with the time since the demo started.
func (p *printer) say(format string, args ...any) {
	fmt.Fprintf(p.out, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// once prints a line the first time its key is seen.
func (p *printer) once(key, format string, args ...any) { p.change(key, "", format, args...) }

// change prints a line when a key is new or its value is not the one last printed under it.
func (p *printer) change(key, value, format string, args ...any) {
	if last, ok := p.last[key]; ok && last == value {
		return
	}
	if p.last == nil {
		p.last = map[string]string{}
	}
	p.last[key] = value
	p.say(format, args...)
}

// demoPods lists the demo namespace's pods with labels that are not being deleted, sorted by
// name.
func demoPods(ctx context.Context, c client.Client, labels client.MatchingLabels) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(DemoNamespace), labels); err != nil {
		return nil, fmt.Errorf("listing pods %v: %w", map[string]string(labels), err)
	}
	out := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// seatPods lists the live seat pods matching labels, by name; seats live in berth's namespace.
func seatPods(ctx context.Context, c client.Client, labels client.MatchingLabels) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(rig.BerthNamespace), labels); err != nil {
		return nil, fmt.Errorf("listing seats %v: %w", map[string]string(labels), err)
	}
	out := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// createGang creates a PodGroup and its MinMember members <name>-0, <name>-1, ..., made by
// member and labelled with the group.
func createGang(ctx context.Context, c client.Client, pg *berthv1alpha1.PodGroup, member func(name string) *corev1.Pod) error {
	if err := c.Create(ctx, pg); err != nil {
		return fmt.Errorf("creating PodGroup %s: %w", pg.Name, err)
	}
	for i := range pg.Spec.MinMember {
		m := member(fmt.Sprintf("%s-%d", pg.Name, i))
		m.Labels[berthv1alpha1.PodGroupLabel] = pg.Name
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
	}
	return nil
}

// demoGroup is a PodGroup of the demo namespace.
func demoGroup(name string, minMember int32) *berthv1alpha1.PodGroup {
	return &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace},
		Spec:       berthv1alpha1.PodGroupSpec{MinMember: minMember},
	}
}

// rigPool is (a copy of) the NodePool `berth dev up` installs under a name.
func rigPool(name string) (*karpv1.NodePool, error) {
	for _, np := range rig.DevNodePools() {
		if np.Name == name {
			return np, nil
		}
	}
	return nil, fmt.Errorf("the rig has no NodePool %s", name)
}

// quantity prints a resource of a list, "0" when it is not there.
func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "0"
	}
	return q.String()
}

// shorten cuts a message to 160 characters for one line of output.
func shorten(s string) string {
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return strings.TrimSpace(s)
}

// orNone joins names, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// sortedKeys are a set's members, sorted.
func sortedKeys(set map[string]bool) []string { return slices.Sorted(maps.Keys(set)) }

// podNames lists pods' names.
func podNames(pods []corev1.Pod) string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return strings.Join(out, ", ")
}

// conditionSummary lists conditions as Type=Status (Reason).
func conditionSummary(conds []metav1.Condition) string {
	var out []string
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(out, ", ")
}
