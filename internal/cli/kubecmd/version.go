package kubecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/internal/version"
)

// Version is `version`.
func Version() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
		},
	}
}
