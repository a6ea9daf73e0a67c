package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/internal/devcluster"
	"github.com/berth-dev/berth/internal/rig"
)

// newDevCommand is `berth dev`: the local dev cluster's up, serve, status, down and demo, and
// the vLLM emulator the cluster runs.
func newDevCommand() *cobra.Command {
	o := &devcluster.Options{}
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster with real Kubernetes, Karpenter (kwok) and berth on loopback",
		Long: `Run berth's local dev cluster: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kwok (fake kubelets), Karpenter's kwok provider with AWS-shaped GPU
instance types and one NodePool per GPU family, and berth's own components — all real
binaries on 127.0.0.1, no Docker, no cloud.

The binaries come from hack/build-tools.sh (make tools), which builds them from the Go module
proxy once and caches them; pass that folder with --tools-dir or $BERTH_TOOLS_DIR.

State lives in --state-dir (default ` + devcluster.DefaultStateDir() + `); the admin kubeconfig
is written to --kubeconfig (default <state-dir>/kubeconfig).`,
	}
	pf := dev.PersistentFlags()
	pf.StringVar(&o.StateDir, "state-dir", devcluster.DefaultStateDir(), "folder for the cluster's state and logs (removed by 'down')")
	pf.StringVar(&o.Kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default <state-dir>/kubeconfig)")
	dev.AddCommand(newDevUpCommand(o), newDevServeCommand(o), newDevStatusCommand(o), newDevDownCommand(o), newDevDemoCommand(o), newVLLMSimCommand())
	return dev
}

// newDevUpCommand is `berth dev up`.
func newDevUpCommand(o *devcluster.Options) *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "Start the dev cluster in the background and wait until it is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rig.CheckPlatform(); err != nil {
				return err
			}
			if err := setBerthBinary(o); err != nil {
				return err
			}
			return devcluster.Up(cmd.Context(), *o, cmd.OutOrStdout())
		},
	}
	addRigFlags(up, o)
	return up
}

// newDevServeCommand is `berth dev serve`, what `up` runs in the background.
func newDevServeCommand(o *devcluster.Options) *cobra.Command {
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the dev cluster in the foreground (what 'up' starts in the background)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setBerthBinary(o); err != nil {
				return err
			}
			o.Logf = func(format string, args ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
			}
			return devcluster.Serve(cmd.Context(), *o)
		},
	}
	addRigFlags(serve, o)
	return serve
}

// setBerthBinary points the dev cluster at this berth binary, which it runs berth's components
// with.
func setBerthBinary(o *devcluster.Options) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the berth binary: %w", err)
	}
	o.BerthBinary = bin
	return nil
}

// newDevStatusCommand is `berth dev status`.
func newDevStatusCommand(o *devcluster.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show what the dev cluster runs (exit status 1 when it is not up)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			up, err := devcluster.Status(*o, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if !up {
				return fmt.Errorf("dev cluster is not up")
			}
			return nil
		},
	}
}

// newDevDownCommand is `berth dev down`.
func newDevDownCommand(o *devcluster.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every process of the dev cluster and remove its state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devcluster.Down(*o, cmd.OutOrStdout())
		},
	}
}

// newDevDemoCommand is `berth dev demo [--list] [--scene NAME]...`.
func newDevDemoCommand(o *devcluster.Options) *cobra.Command {
	var list bool
	var names []string
	var lines []string
	for _, s := range devcluster.Scenes() {
		lines = append(lines, fmt.Sprintf("  %-10s %s", s.Name, s.Title))
	}
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Run the scripted demo scenario against the running dev cluster",
		Long: `Run the scripted demo scenario against the running dev cluster: remove what an earlier
run left in namespace ` + devcluster.DemoNamespace + `, then play the scenes in this order (all of them, or
those named with --scene), printing what happens as it happens:

` + strings.Join(lines, "\n"),
		Example: `  berth dev demo --list
  berth dev demo --scene gang
  berth dev demo --scene training,guard`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				return devcluster.ListScenes(cmd.OutOrStdout())
			}
			if err := devcluster.CheckScenes(names...); err != nil {
				return err
			}
			st, ok, err := devcluster.ReadState(o.StateDir)
			if err != nil {
				return err
			}
			if !ok || !st.Ready {
				return fmt.Errorf("no dev cluster is up in %s: run 'berth dev up' first", o.StateDir)
			}
			return devcluster.Demo(cmd.Context(), st.Kubeconfig, cmd.OutOrStdout(), names...)
		},
	}
	demo.Flags().BoolVar(&list, "list", false, "print the scenes (name and title) in the order they play, and exit")
	demo.Flags().StringSliceVar(&names, "scene", nil, "play only scene `NAME` (repeatable, or comma-separated); scenes play in the order --list shows")
	demo.MarkFlagsMutuallyExclusive("list", "scene")
	return demo
}

// addRigFlags adds the flags of the commands that start the dev cluster.
func addRigFlags(cmd *cobra.Command, o *devcluster.Options) {
	cmd.Flags().StringVar(&o.ToolsDir, "tools-dir", os.Getenv(rig.ToolsDirEnv), "folder made by hack/build-tools.sh (default $"+rig.ToolsDirEnv+")")
	cmd.Flags().DurationVar(&o.NodeReadyDelay, "node-ready-delay", 0, "how long new nodes take to become Ready (about 70s looks like a real GPU node)")
	cmd.Flags().BoolVar(&o.GenericWorkload, "generic-workload", false, "turn on Kubernetes' native gang scheduling (feature gate GenericWorkload, scheduling.k8s.io/v1beta1 Workload and PodGroup) in the control plane; berth then serves native gangs (docs/native-gangs.md)")
	cmd.Flags().BoolVar(&o.DRA, "dra", false, "GPUs through Dynamic Resource Allocation: GPU nodes publish their GPUs as gpu.nvidia.com ResourceSlices and Karpenter sizes pods' resource claims against them (needs hack/build-tools.sh karpenter-kwok-dra; docs/dra.md)")
	cmd.Flags().BoolVar(&o.Kueue, "kueue", false, "also run Kueue (its CRDs, webhooks and ProvisioningRequest admission check), with berth serving its ProvisioningRequests; apply config/samples/kueue/queues.yaml to try the setup of docs/kueue.md")
}
