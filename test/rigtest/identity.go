package rigtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/internal/rig"
)

// Components run on the rig as the chart runs them: as a ServiceAccount of their own, bound to
// exactly the roles in config/rbac (the chart's files/rbac copies them), never with the rig's
// admin kubeconfig — so a verb missing from the shipped RBAC fails a test instead of shipping.

// rbacFiles are each component's RBAC files in config/rbac (the scaler with warm seats is bound
// to its roles and the warm seats', as the chart binds them with scaler.warmSeats.enabled).
var rbacFiles = map[string][]string{"controller": {"role.yaml"}, "scaler": {"scaler.yaml", "scaler-models.yaml"}, "agent": {"agent.yaml"}, "metrics-reader": {"metrics-reader.yaml"},
	"scaler-warm-seats": {"scaler.yaml", "scaler-models.yaml", "scaler-warm-seats.yaml"}}

var identities sync.Map // rig work dir + component → kubeconfig path

// ComponentKubeconfig is a kubeconfig for berth's component (controller, scaler, agent) as the
// chart deploys it: ServiceAccount berth-<component> in rig.BerthNamespace bound to the
// ClusterRole (and, for the controller, the Role in its namespace) of config/rbac. Made once
// per rig.
func ComponentKubeconfig(ctx context.Context, r *rig.Rig, component string) (string, error) {
	key := r.WorkDir() + "/" + component
	if p, ok := identities.Load(key); ok {
		return p.(string), nil
	}
	files, ok := rbacFiles[component]
	if !ok {
		return "", fmt.Errorf("no RBAC for component %q", component)
	}
	docs, err := rbacDocs(files)
	if err != nil {
		return "", err
	}
	file := strings.Join(files, ", ")
	name := "berth-" + component
	c := r.Client
	if err := createOrKeep(ctx, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rig.BerthNamespace}}); err != nil {
		return "", err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: rig.BerthNamespace}}
	roles := 0
	for _, doc := range docs {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return "", fmt.Errorf("parsing %s: %w", file, err)
		}
		switch head.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(doc), &cr); err != nil {
				return "", fmt.Errorf("parsing %s: %w", file, err)
			}
			if cr.Name = name; roles > 0 {
				cr.Name = fmt.Sprintf("%s-%d", name, roles)
			}
			roles++
			if err := createOrKeep(ctx, c, &cr); err != nil {
				return "", err
			}
			if err := createOrKeep(ctx, c, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: subject}); err != nil {
				return "", err
			}
		case "Role":
			var role rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				return "", fmt.Errorf("parsing %s: %w", file, err)
			}
			role.Name, role.Namespace = name, rig.BerthNamespace
			if err := createOrKeep(ctx, c, &role); err != nil {
				return "", err
			}
			if err := createOrKeep(ctx, c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rig.BerthNamespace},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject}); err != nil {
				return "", err
			}
		}
	}
	path, err := tokenKubeconfig(ctx, r, rig.BerthNamespace, name)
	if err != nil {
		return "", err
	}
	identities.Store(key, path)
	return path, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as ServiceAccount name in
// rig.BerthNamespace with a day-long token: a process started with it has exactly that
// account's permissions (the chart's, after a helm install).
func ServiceAccountKubeconfig(ctx context.Context, r *rig.Rig, name string) (string, error) {
	return tokenKubeconfig(ctx, r, rig.BerthNamespace, name)
}

// NamespacedServiceAccountKubeconfig is ServiceAccountKubeconfig for an account in namespace ns.
func NamespacedServiceAccountKubeconfig(ctx context.Context, r *rig.Rig, ns, name string) (string, error) {
	return tokenKubeconfig(ctx, r, ns, name)
}

// ServiceAccountToken is a day-long token of ServiceAccount ns/name.
func ServiceAccountToken(ctx context.Context, r *rig.Rig, ns, name string) (string, error) {
	cs, err := kubernetes.NewForConfig(r.Config)
	if err != nil {
		return "", err
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for %s/%s: %w", ns, name, err)
	}
	return tok.Status.Token, nil
}

// tokenKubeconfig writes a kubeconfig that authenticates as ServiceAccount ns/name with a
// day-long token.
func tokenKubeconfig(ctx context.Context, r *rig.Rig, ns, name string) (string, error) {
	token, err := ServiceAccountToken(ctx, r, ns, name)
	if err != nil {
		return "", err
	}
	admin, err := clientcmd.LoadFromFile(r.Kubeconfig)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rig"] = admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "rig", AuthInfo: name}
	cfg.CurrentContext = name
	file := name + ".kubeconfig"
	if ns != rig.BerthNamespace {
		file = ns + "-" + file
	}
	path := filepath.Join(r.WorkDir(), file)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// rbacDocs are the YAML documents of config/rbac's files.
func rbacDocs(files []string) ([]string, error) {
	_, self, _, _ := runtime.Caller(0)
	var docs []string
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "config", "rbac", file))
		if err != nil {
			return nil, fmt.Errorf("reading berth's RBAC: %w", err)
		}
		docs = append(docs, regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1)...)
	}
	return docs, nil
}

// createOrKeep creates obj unless it exists.
func createOrKeep(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// ComponentToken is the bearer token of ComponentKubeconfig's ServiceAccount (what a scraper
// bound to config/rbac/metrics-reader.yaml presents, for component "metrics-reader").
func ComponentToken(ctx context.Context, r *rig.Rig, component string) (string, error) {
	path, err := ComponentKubeconfig(ctx, r, component)
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	return cfg.AuthInfos["berth-"+component].Token, nil
}

// ComponentClient is a client acting as berth's component (ComponentKubeconfig), for tests
// that run a component's code in the test process.
func ComponentClient(ctx context.Context, r *rig.Rig, component string) (client.Client, error) {
	cfg, err := ComponentConfig(ctx, r, component)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: r.Client.Scheme()})
}

// ComponentConfig is the REST config of ComponentKubeconfig, for tests that build a
// component's informer caches in the test process.
func ComponentConfig(ctx context.Context, r *rig.Rig, component string) (*rest.Config, error) {
	path, err := ComponentKubeconfig(ctx, r, component)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	return cfg, nil
}
