package kubecmd

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

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

// ExitCode is the exit status a command's error asks for, when it is one of this package's.
func ExitCode(err error) (int, bool) {
	var coded exitError
	if errors.As(err, &coded) {
		return coded.ExitCode(), true
	}
	return 0, false
}

// couldNotCheck marks a doctor error that stopped it checking anything: exit 2.
func couldNotCheck(err error) error {
	var coded exitError
	if err == nil || errors.As(err, &coded) {
		return err
	}
	return exitError{code: 2, err: err}
}

// Doctor is `doctor`.
func Doctor() *cobra.Command {
	var output string
	kube := newClientFlags()
	var skip []string
	var install, noHeaders bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find GPU autoscaling set-ups that misbehave, with a fix for each",
		Long: `Read the cluster through the kubeconfig and report, naming each object and a fix:
autoscalers (HPA, KEDA ScaledObject) driven by GPU duty cycle, GPU memory, CPU or memory; GPU
ScaledObjects without a fallback, or scaled to zero with no demand that exists at zero; GPU
NodePools that let Karpenter consolidate busy nodes, have no nvidia.com/gpu taint or limit,
release empty nodes faster than a model loads, or expire training nodes; EC2NodeClasses of GPU
pools on an @latest AMI; general NodePools that can launch GPU instances; Karpenter ignoring
DRA claims, or without NodeRepair where berth's agent watches GPUs; multi-pod GPU Jobs whose
pods need each other, JobSets and PyTorchJobs without a gang; vLLM/SGLang Deployments that
nothing scales on load; Prometheus triggers on vLLM metrics without aggregation (docs/doctor.md).

With --install it checks berth's own install in -n NAMESPACE (berth's) instead: the PodGroup
CRD serves the version this berth speaks; the pod-gate webhook answers the API server with a
certificate its CA bundle trusts (a gang member's server-side dry run must come back gated;
nothing is created); a controller replica holds and renews the leader Lease; berth's agent
reports on every GPU node. helm test runs it.

A check that needs objects you may not list is skipped, and the report says which and why.
Exit status: 0 nothing found, 1 problems found, 2 could not check (an error, or a check
skipped for lack of access with nothing found).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return couldNotCheck(runDoctor(cmd, doctorFlags{kube: kube, output: output, skip: skip, install: install, noHeaders: noHeaders}))
		},
	}
	// A bad flag is "could not check" (2), not "found problems" (1).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: 2, err: err} })
	fl := cmd.Flags()
	(&kube).bind(fl) // -n: the namespace to check (NodePools are cluster-wide); without it, all
	fl.StringVarP(&output, "output", "o", "text", "output format: "+strings.Join(outputFormats, ", "))
	fl.BoolVar(&noHeaders, "no-headers", false, "with -o wide or custom-columns: no header line")
	fl.BoolVar(&install, "install", false, "check berth's own install in -n, berth's namespace (CRD, webhook reachable and trusted, a leader, an agent on every GPU node) instead of the workloads")
	fl.StringSliceVar(&skip, "skip", nil, "checks not to run, comma-separated: "+strings.Join(doctor.Checks(), ", ")+"; with --install: "+strings.Join(doctor.InstallChecks(), ", "))
	return cmd
}

// doctorFlags are berth doctor's flags.
type doctorFlags struct {
	kube      clientFlags
	output    string
	skip      []string
	install   bool
	noHeaders bool
}

// runDoctor reads, checks and prints; ErrFindings or ErrIncomplete say what it found.
func runDoctor(cmd *cobra.Command, f doctorFlags) error {
	skip := f.skip
	output, err := parseOutput(f.output)
	if err != nil {
		return err
	}
	names := doctor.Checks()
	if f.install {
		names = doctor.InstallChecks()
	}
	for _, s := range skip {
		if !slices.Contains(names, s) {
			return fmt.Errorf("--skip: %q is not a check (%s)", s, strings.Join(names, ", "))
		}
	}
	cfg, err := f.kube.restConfig()
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
			return errors.Join(printReport(cmd.OutOrStdout(), report, output, f.noHeaders), err)
		}
		return err
	}
	if err := printReport(cmd.OutOrStdout(), report, output, f.noHeaders); err != nil {
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
		ns := f.kube.explicitNamespace()
		if ns == "" {
			ns = "default"
		}
		return doctor.Install(cmd.Context(), c, ns, time.Now(), f.skip...)
	}
	snap, err := doctor.Read(cmd.Context(), c, f.kube.explicitNamespace())
	if err != nil {
		return doctor.Report{}, err
	}
	return doctor.Run(snap, f.skip...), nil
}

// The cluster's native gang scheduling, as the human report states it.
const (
	genericWorkloadOff = "off (gangs are berth PodGroups, scheduling.berth.dev/v1alpha1)"
	genericWorkloadOn  = "on (scheduling.k8s.io/v1beta1 PodGroups are served; docs/native-gangs.md says which to use when)"
)

func printReport(w io.Writer, r doctor.Report, o output, noHeaders bool) error {
	format := o.kind
	switch format {
	case "jsonpath", "custom-columns":
		if r.Findings == nil {
			r.Findings = []doctor.Finding{}
		}
		return printTemplate(w, r, r.Findings, o, noHeaders)
	case "name":
		for _, f := range r.Findings {
			if _, err := fmt.Fprintln(w, objectName(f.Object)); err != nil {
				return err
			}
		}
		return nil
	case "json", "yaml":
		if r.Findings == nil {
			r.Findings = []doctor.Finding{}
		}
		if r.Skipped == nil {
			r.Skipped = []doctor.Skipped{}
		}
		return printStructured(w, r, format)
	}
	if format == "wide" {
		// One line per finding, for wide terminals and grep: check, object, problem, fix.
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if !noHeaders {
			fmt.Fprintln(tw, "CHECK\tOBJECT\tPROBLEM\tFIX")
		}
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Check, f.Object, f.Problem, f.Fix)
		}
		for _, sk := range r.Skipped {
			fmt.Fprintf(tw, "%s\t\tskipped: %s\t\n", sk.Check, sk.Reason)
		}
		return tw.Flush()
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
	gw := genericWorkloadOff
	if r.GenericWorkload {
		gw = genericWorkloadOn
	}
	if _, err := fmt.Fprintf(w, "native gang scheduling (GenericWorkload): %s\n", gw); err != nil {
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

// objectName turns a finding's "Kind namespace/name" into kubectl's kind/name (the namespace
// is dropped, as kubectl -o name does).
func objectName(object string) string {
	kind, name, ok := strings.Cut(object, " ")
	if !ok {
		return object
	}
	if _, n, found := strings.Cut(name, "/"); found {
		name = n
	}
	return strings.ToLower(kind) + "/" + name
}
