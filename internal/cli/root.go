// Package cli builds berth's command line: one cobra command per subcommand, each a thin layer
// over the package that does the work.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/internal/cli/kubecmd"
)

// Execute runs the berth command line with args and returns the process exit status.
func Execute(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := NewRootCommand()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "berth:", err)
		// Only berth's own exit errors set the status (not a child process's *exec.ExitError).
		if code, ok := kubecmd.ExitCode(err); ok {
			return code
		}
		return 1
	}
	return 0
}

// ErrFindings and ErrIncomplete are what `berth doctor` returns when it found problems (exit 1)
// or could not run every check (exit 2).
var (
	ErrFindings   = kubecmd.ErrFindings
	ErrIncomplete = kubecmd.ErrIncomplete
)

// NewRootCommand is the `berth` command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "berth",
		Short: "GPU capacity on Kubernetes that arrives whole and stays put",
		Long: `berth keeps GPU workloads on Kubernetes whole and stable:

  - gang admission: pods of a PodGroup (scheduling.berth.dev/v1alpha1) are held by a
    scheduling gate until every member fits, then released together;
  - Karpenter integration: a gang's capacity is provisioned in one batch, and GPU NodePools
    are guarded against consolidation evicting running inference or training;
  - a KEDA external scaler that sizes vLLM Deployments from queue depth and KV-cache usage.

Run 'berth dev up' for a local cluster with real Kubernetes and Karpenter on loopback.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newControllerCommand(), newAgentCommand(), newDevCommand(), newSimulateCommand(), kubecmd.NodePools(), kubecmd.Version(), kubecmd.Doctor(), kubecmd.Why(), newScalerCommand())
	return root
}
