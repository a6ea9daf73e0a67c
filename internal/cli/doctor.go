package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/internal/doctor"
)

// ErrFindings is what `berth doctor` returns when it found something (the command exits 1).
var ErrFindings = errors.New("doctor found problems")

// ErrIncomplete is what `berth doctor` returns when it found nothing but could not run every
// check (berth may not list what some need; the command exits 2).
var ErrIncomplete = exitError{code: 2, err: errors.New("doctor could not run every check (see skipped)")}

// exitError is an error with the exit status the command ends with.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// ExitCode is the process exit status for e.
func (e exitError) ExitCode() int { return e.code }

// couldNotCheck marks a doctor error that stopped it checking anything: exit 2.
func couldNotCheck(err error) error {
	var coded exitError
	if err == nil || errors.As(err, &coded) {
		return err
	}
	return exitError{code: 2, err: err}
}

func newDoctorCommand() *cobra.Command {
	var kubeconfig, namespace, output string
	var skip []string
	var install bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find GPU autoscaling set-ups that misbehave, with a fix for each",
		Long: `Read the cluster through the kubeconfig and report, naming each object and a fix:
autoscalers (HPA, KEDA ScaledObject) driven by GPU duty cycle or GPU memory; GPU NodePools on
WhenEmptyOrUnderutilized without an Underutilized budget; multi-pod GPU Jobs, JobSets and
PyTorchJobs without a gang; vLLM Deployments without a queue- or KV-cache-based scaler;
Prometheus triggers on vLLM metrics without aggregation.

With --install it checks berth's own install instead: the PodGroup CRD serves the version
this berth speaks, and the pod-gate webhook answers the API server with a certificate its CA
bundle trusts (a gang member's server-side dry run in -n NAMESPACE must come back gated; nothing
is created). helm test runs it.

A check that needs objects you may not list is skipped, and the report says which and why.
Exit status: 0 nothing found, 1 problems found, 2 could not check (an error, or a check
skipped for lack of access with nothing found).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return couldNotCheck(runDoctor(cmd, doctorFlags{kubeconfig, namespace, output, skip, install}))
		},
	}
	// A bad flag is "could not check" (2), not "found problems" (1).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: 2, err: err} })
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, in-cluster config or ~/.kube/config")
	fl.StringVarP(&namespace, "namespace", "n", "", "namespace to check (NodePools are cluster-wide); empty checks all")
	fl.StringVarP(&output, "output", "o", "text", "output format: text or json")
	fl.BoolVar(&install, "install", false, "check berth's own install (CRD, webhook reachable and trusted) instead of the workloads; the dry-run member goes in -n (default \"default\")")
	fl.StringSliceVar(&skip, "skip", nil, "checks not to run, comma-separated: "+strings.Join(doctor.Checks(), ", "))
	return cmd
}

// doctorFlags are berth doctor's flags.
type doctorFlags struct {
	kubeconfig, namespace, output string
	skip                          []string
	install                       bool
}

// runDoctor reads, checks and prints; ErrFindings or ErrIncomplete say what it found.
func runDoctor(cmd *cobra.Command, f doctorFlags) error {
	kubeconfig, output, skip := f.kubeconfig, f.output, f.skip
	if output != "text" && output != "json" {
		return fmt.Errorf("-o: %q is not a format (text, json)", output)
	}
	for _, s := range skip {
		if !slices.Contains(doctor.Checks(), s) {
			return fmt.Errorf("--skip: %q is not a check (%s)", s, strings.Join(doctor.Checks(), ", "))
		}
	}
	cfg, err := loadConfig(kubeconfig)
	if err != nil {
		return err
	}
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("adding CRD types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	report, err := doctorReport(cmd, c, f)
	if err != nil {
		// What was found before the error still counts: show it, then the error (exit 2).
		if len(report.Findings) > 0 {
			return errors.Join(printReport(cmd.OutOrStdout(), report, output), err)
		}
		return err
	}
	if err := printReport(cmd.OutOrStdout(), report, output); err != nil {
		return err
	}
	switch {
	case len(report.Findings) > 0:
		return exitError{code: 1, err: ErrFindings}
	case report.Incomplete:
		return ErrIncomplete
	}
	return nil
}

// doctorReport runs the install checks (--install) or reads the workloads and checks them.
func doctorReport(cmd *cobra.Command, c client.Client, f doctorFlags) (doctor.Report, error) {
	if f.install {
		ns := f.namespace
		if ns == "" {
			ns = "default"
		}
		return doctor.Install(cmd.Context(), c, ns)
	}
	snap, err := doctor.Read(cmd.Context(), c, f.namespace)
	if err != nil {
		return doctor.Report{}, err
	}
	return doctor.Run(snap, f.skip...), nil
}

func printReport(w io.Writer, r doctor.Report, format string) error {
	if format == "json" {
		if r.Findings == nil {
			r.Findings = []doctor.Finding{}
		}
		if r.Skipped == nil {
			r.Skipped = []doctor.Skipped{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\n\tproblem: %s\n\tfix: %s\n", f.Check, f.Object, f.Problem, f.Fix)
	}
	for _, sk := range r.Skipped {
		fmt.Fprintf(tw, "skipped %s\t%s\n", sk.Check, sk.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if len(r.Findings) == 0 {
		_, err = fmt.Fprintln(w, "no problems found")
	} else {
		_, err = fmt.Fprintf(w, "%d problem(s) found\n", len(r.Findings))
	}
	return err
}
