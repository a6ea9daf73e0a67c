package kubecmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

// Plugin is the kubectl-berth command: `kubectl berth doctor|why|nodepools|version`.
func Plugin() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-berth",
		Short: "berth's client commands as a kubectl plugin",
		Long: `kubectl berth: berth's client commands, with kubectl's connection flags.

  kubectl berth why PODGROUP     what a gang waits for
  kubectl berth doctor           GPU autoscaling set-ups that misbehave, with a fix for each
  kubectl berth nodepools render Karpenter NodePool templates per GPU family`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(Doctor(), Why(), NodePools(), Version())
	return root
}

// ExecutePlugin runs the plugin with args and returns the process exit status.
func ExecutePlugin(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := Plugin()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-berth:", err)
		if code, ok := ExitCode(err); ok {
			return code
		}
		return 1
	}
	return 0
}
