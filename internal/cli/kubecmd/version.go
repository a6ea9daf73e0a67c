package kubecmd

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/version"
)

// versionInfo is what `version` reports: this binary, and with a cluster, its Kubernetes and
// the berth controllers installed in it (as the chart labels them).
type versionInfo struct {
	Client      string              `json:"client"`
	Kubernetes  string              `json:"kubernetes,omitempty"`
	Controllers []controllerVersion `json:"controllers,omitempty"`
}

// controllerVersion is one installed berth controller Deployment.
type controllerVersion struct {
	Deployment string `json:"deployment"`
	Version    string `json:"version"`
	Image      string `json:"image"`
}

// Version is `version`: the client's version, and unless --client (or no cluster is configured),
// the cluster's Kubernetes version and every berth controller Deployment's
// (app.kubernetes.io/version, image), as kubectl version shows client and server; a cluster that
// cannot be read is an error after the client's version is printed.
func Version() *cobra.Command {
	kube := newClientFlags()
	var clientOnly bool
	var output string
	cmd := &cobra.Command{
		Use:          "version",
		Short:        "Print the version of this binary and of berth in the cluster",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o: %q is not a format (json, yaml)", output)
			}
			info := versionInfo{Client: version.String()}
			var err error
			if !clientOnly {
				err = readServerVersions(cmd, kube, &info)
			}
			if output != "" {
				return joinErr(printStructured(cmd.OutOrStdout(), info, output), err)
			}
			return joinErr(printVersions(cmd.OutOrStdout(), info), err)
		},
	}
	fl := cmd.Flags()
	(&kube).bind(fl)
	fl.BoolVar(&clientOnly, "client", false, "only this binary's version (no cluster access)")
	fl.StringVarP(&output, "output", "o", "", "json or yaml (default: text)")
	return cmd
}

// joinErr returns the printing error, or else the cluster's.
func joinErr(printErr, clusterErr error) error {
	if printErr != nil {
		return printErr
	}
	return clusterErr
}

// readServerVersions fills the Kubernetes version and the berth controllers in every namespace.
func readServerVersions(cmd *cobra.Command, kube clientFlags, info *versionInfo) error {
	cfg, err := kube.restConfig()
	if clientcmd.IsEmptyConfig(errors.Unwrap(err)) {
		return nil // no cluster configured (a bare container, a laptop): the client's version only
	}
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	sv, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the server's version: %w", err)
	}
	info.Kubernetes = sv.GitVersion
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	var deps appsv1.DeploymentList
	if err := c.List(cmd.Context(), &deps, client.MatchingLabels{berthv1alpha1.NameLabel: "berth", berthv1alpha1.ComponentLabel: "controller"}); err != nil {
		return fmt.Errorf("listing berth's controller Deployments: %w", err)
	}
	for _, d := range deps.Items {
		cv := controllerVersion{Deployment: d.Namespace + "/" + d.Name, Version: d.Labels[berthv1alpha1.VersionLabel]}
		for _, ct := range d.Spec.Template.Spec.Containers {
			if ct.Name == "controller" {
				cv.Image = ct.Image
			}
		}
		info.Controllers = append(info.Controllers, cv)
	}
	sort.Slice(info.Controllers, func(i, j int) bool { return info.Controllers[i].Deployment < info.Controllers[j].Deployment })
	return nil
}

// printVersions writes the versions for a person.
func printVersions(w io.Writer, info versionInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s\n", info.Client)
	if info.Kubernetes != "" {
		fmt.Fprintf(&b, "kubernetes: %s\n", info.Kubernetes)
		if len(info.Controllers) == 0 {
			b.WriteString("berth controller: none found (no Deployment labelled app.kubernetes.io/name=berth, component=controller)\n")
		}
		for _, cv := range info.Controllers {
			fmt.Fprintf(&b, "berth controller %s: %s (%s)\n", cv.Deployment, cv.Version, cv.Image)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
