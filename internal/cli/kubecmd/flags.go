package kubecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// clientFlags are kubectl's connection flags with kubectl's meaning: --kubeconfig, --context,
// --cluster, --user, -n/--namespace, --as, --as-group, --as-uid, --request-timeout, --server,
// --token, --certificate-authority, --insecure-skip-tls-verify and the rest of client-go's
// clientcmd overrides (what k8s.io/cli-runtime's ConfigFlags wraps). cli-runtime itself is not
// linked: its genericclioptions package pulls in Go's plugin package (through kustomize), which
// links the binary with immediate symbol binding, and the agent's NVML symbols must bind lazily
// (go-nvml resolves them from the driver at run time) — the berth binary would not start.
type clientFlags struct {
	kubeconfig string
	overrides  *clientcmd.ConfigOverrides
}

func newClientFlags() clientFlags { return clientFlags{overrides: &clientcmd.ConfigOverrides{}} }

func (f *clientFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file (default $KUBECONFIG, in-cluster config or ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ContextOverrideFlags.Namespace.ShortName = "n"
	names.Timeout.Default = "0"
	clientcmd.BindOverrideFlags(f.overrides, fl, names)
}

func (f clientFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, f.overrides)
}

// restConfig is the connection the flags (and the kubeconfig they name) describe.
func (f clientFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.loader().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the client configuration: %w", err)
	}
	if f.overrides.Timeout != "" && f.overrides.Timeout != "0" {
		d, err := time.ParseDuration(f.overrides.Timeout)
		if err != nil {
			return nil, fmt.Errorf("--request-timeout %q: %w", f.overrides.Timeout, err)
		}
		cfg.Timeout = d
	}
	return cfg, nil
}

// explicitNamespace is -n when given ("" when not).
func (f clientFlags) explicitNamespace() string { return f.overrides.Context.Namespace }

// namespace is -n, or the kubeconfig context's namespace, or "default" (kubectl's rule).
func (f clientFlags) namespace() (string, error) {
	ns, _, err := f.loader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace: %w", err)
	}
	return ns, nil
}

// printStructured writes v as JSON or YAML (format "json" or "yaml").
func printStructured(w io.Writer, v any, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		out, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(out)
		return err
	}
	return fmt.Errorf("-o: %q is not a format (text, wide, name, json, yaml)", format)
}
