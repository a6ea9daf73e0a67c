package kubecmd

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/internal/why"
)

// Why is `why PODGROUP`.
func Why() *cobra.Command {
	kube := newClientFlags()
	var output string
	var noHeaders bool
	cmd := &cobra.Command{
		Use:   "why PODGROUP",
		Short: "Say what a gang waits for: members, gates, capacity, NodePool limits, quotas",
		Long: `Explain what the PodGroup (podgroups.scheduling.berth.dev) waits for: its Scheduled condition,
each member's state (gated by berth until the whole gang fits, held by another scheduler's gate,
released onto a node, bound, running) with kube-scheduler's reason for a member it does not bind,
the capacity request in flight and its last failure, the GPU limit of its NodePool, and the
namespace's ResourceQuotas on what the waiting members ask for. -o json|yaml for tools.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := parseOutput(output)
			if err != nil {
				return err
			}
			cfg, err := kube.restConfig()
			if err != nil {
				return err
			}
			ns, err := kube.namespace()
			if err != nil {
				return err
			}
			scheme, err := controllers.NewScheme()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("creating client: %w", err)
			}
			in, err := why.Read(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			ex := why.Explain(in)
			switch o.kind {
			case "jsonpath", "custom-columns":
				return printTemplate(cmd.OutOrStdout(), ex, ex.Members, o, noHeaders)
			case "name":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "podgroup."+berthv1alpha1.GroupVersion.Group+"/"+args[0])
				return err
			case "text", "wide":
				return printExplanation(cmd.OutOrStdout(), ex, o.kind == "wide")
			}
			return printStructured(cmd.OutOrStdout(), ex, o.kind)
		},
	}
	fl := cmd.Flags()
	(&kube).bind(fl)
	fl.StringVarP(&output, "output", "o", "text", "output format: "+strings.Join(outputFormats, ", "))
	fl.BoolVar(&noHeaders, "no-headers", false, "with -o custom-columns: no header line")
	return cmd
}

// printExplanation writes the explanation for a person: the summary, then the members (wide:
// with the capacity request, the NodePool and the quotas too).
func printExplanation(w io.Writer, ex why.Explanation, wide bool) error {
	fmt.Fprintf(w, "PodGroup %s: %s (minMember %d)\n", ex.PodGroup, ex.Phase, ex.MinMember)
	for _, s := range ex.Summary {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	if len(ex.Members) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tNODE\tGPUS\tDETAIL")
	for _, m := range ex.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.Name, m.State, m.Node, m.GPUs, m.Detail)
	}
	for _, m := range ex.Members {
		for _, d := range m.Devices {
			fmt.Fprintf(tw, "%s\tclaim\t\t\t%s\n", m.Name, d)
		}
	}
	if wide {
		if c := ex.Capacity; c != nil {
			fmt.Fprintf(tw, "\ncapacity\t%s\tattempt %d\t%d seat(s)\t%s\n", c.Reason, c.Attempt, c.Seats, c.Message)
		}
		if np := ex.NodePool; np != nil {
			fmt.Fprintf(tw, "nodepool\t%s\tGPU limit %s\tin use %s\t\n", np.Name, orNone(np.Limit), orNone(np.Used))
		}
		for _, q := range ex.Quotas {
			fmt.Fprintf(tw, "quota\t%s\t%s\t%s of %s\tshort: %t\n", q.Quota, q.Resource, q.Used, q.Hard, q.Short)
		}
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
