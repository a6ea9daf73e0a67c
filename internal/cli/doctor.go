package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/internal/doctor"
)

// ErrFindings is what `berth doctor` returns when it found something (the command exits 1).
var ErrFindings = errors.New("doctor found problems")

func newDoctorCommand() *cobra.Command {
	var kubeconfig, namespace, output string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find GPU autoscaling set-ups that misbehave, with a fix for each",
		Long: `Read the cluster through the kubeconfig and report, naming each object and a fix:
autoscalers (HPA, KEDA ScaledObject) driven by GPU duty cycle or GPU memory; GPU NodePools on
WhenEmptyOrUnderutilized without an Underutilized budget; multi-pod GPU Jobs, JobSets and
PyTorchJobs without a gang; vLLM Deployments without a queue- or KV-cache-based scaler;
Prometheus triggers on vLLM metrics without aggregation. Exits 1 when it finds something.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o: %q is not a format (text, json)", output)
			}
			cfg, err := loadConfig(kubeconfig)
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
			snap, err := doctor.Read(cmd.Context(), c, namespace)
			if err != nil {
				return err
			}
			findings := doctor.Run(snap)
			if err := printFindings(cmd.OutOrStdout(), findings, output); err != nil {
				return err
			}
			if len(findings) > 0 {
				return ErrFindings
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, in-cluster config or ~/.kube/config")
	fl.StringVarP(&namespace, "namespace", "n", "", "namespace to check (NodePools are cluster-wide); empty checks all")
	fl.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func printFindings(w io.Writer, fs []doctor.Finding, format string) error {
	if format == "json" {
		if fs == nil {
			fs = []doctor.Finding{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"findings": fs})
	}
	if len(fs) == 0 {
		_, err := fmt.Fprintln(w, "no problems found")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\n\tproblem: %s\n\tfix: %s\n", f.Check, f.Object, f.Problem, f.Fix)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d problem(s) found\n", len(fs))
	return err
}
