package simulate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Report is one `berth simulate` run: what was replayed and what every policy did with it.
type Report struct {
	// Requests says where the request trace came from; Fleet and SLO what it ran on.
	Requests string
	Fleet    Fleet
	// Inference holds one result per autoscaler, berth first; Policies describes each.
	Inference []*InferenceResult
	Policies  map[string]string
	// Frontier is the static-N frontier, when measured.
	Frontier Frontier
	// BurstBlind is the burst-blind limit (BurstBlind), when measured: one run per headroom.
	BurstBlind []*InferenceResult
	// Bursts is when the trace's bursts began, when known.
	Bursts []time.Duration
	// Consolidation holds, when run, berth on a multi-replica-per-node fleet with Karpenter's
	// WhenEmptyOrUnderutilized, without the guard and with it; ConsolidationFleet is that fleet.
	Consolidation      []*InferenceResult
	ConsolidationFleet *Fleet
	// Jobs says where the job trace came from; Cluster what it ran on; Training one result per
	// policy, berth first.
	Jobs     string
	Cluster  Cluster
	Training []*TrainingResult
}

// Goal is one of the targets docs/economics.md sets berth, checked on a report.
type Goal struct {
	// Name says what is compared; Want the target; Got what this run measured.
	Name, Want, Got string
	// Met is whether the run meets it; Known false when the run has nothing to check it on.
	Met, Known bool
}

// inference returns the result of the named autoscaler.
func (r *Report) inference(name string) *InferenceResult {
	for _, res := range r.Inference {
		if res.Autoscaler == name {
			return res
		}
	}
	return nil
}

// Goals checks the run against berth's goals: ≥ 10× fewer SLO-violating requests than the
// duty-cycle HPA (of the attainable ones) at no more GPU-hours; at least the KEDA waiting
// trigger's SLO attainment at ≤ 0.9× its GPU-hours; no idle GPU-hours from partial gangs.
func (r *Report) Goals() []Goal {
	var out []Goal
	b := r.inference(BerthName)
	if d := r.inference((&DutyCycle{}).Name()); b != nil && d != nil {
		g := Goal{Name: "SLO-violating requests vs HPA on duty cycle", Want: "≥ 10× fewer", Known: true}
		// Unattainable requests violate the SLO under any policy: they are left out.
		bv, dv := b.AttainableViolations(), d.AttainableViolations()
		if bv == 0 {
			g.Got, g.Met = fmt.Sprintf("none (vs %d), of attainable requests", dv), true
		} else {
			ratio := float64(dv) / float64(bv)
			g.Got, g.Met = fmt.Sprintf("%.1f× fewer (%d vs %d), of attainable requests", ratio, bv, dv), ratio >= 10
		}
		out = append(out, g)
		h := b.GPUHours / d.GPUHours
		out = append(out, Goal{Name: "GPU-hours vs HPA on duty cycle", Want: "≤ 1.0×",
			Got: fmt.Sprintf("%.2f× (%.1f vs %.1f)", h, b.GPUHours, d.GPUHours), Met: h <= 1, Known: true})
	}
	if b != nil && len(r.Frontier) > 0 {
		at, _ := r.Frontier.At(b.GPUHours)
		v := float64(b.AttainableViolations())
		out = append(out, Goal{Name: "SLO-violating (attainable) vs the static-N frontier at equal GPU-hours", Want: "fewer (≥ 2× on a day)",
			Got: fmt.Sprintf("%s (%d vs %.1f at %.1f GPU-hours)", fewer(v, at), b.AttainableViolations(), at, b.GPUHours), Met: v < at || (v == 0 && at == 0), Known: true})
	}
	if o := r.inference((&Oracle{}).Name()); b != nil && o != nil {
		g := b.GPUHours / o.GPUHours
		out = append(out, Goal{Name: "GPU-hours vs the oracle (clairvoyant)", Want: "≤ 1.25×",
			Got: fmt.Sprintf("%.2f× (%.1f vs %.1f)", g, b.GPUHours, o.GPUHours), Met: g <= 1.25, Known: true})
		bv, ov := b.AttainableViolations(), o.AttainableViolations()
		out = append(out, Goal{Name: "SLO-violating (attainable) vs the oracle", Want: "≤ 2×",
			Got: fmt.Sprintf("%d vs %d", bv, ov), Met: bv <= 2*ov, Known: true})
	}
	if k := r.inference((&KEDAWaiting{}).Name()); b != nil && k != nil {
		out = append(out, Goal{Name: "SLO attainment vs KEDA on vllm:num_requests_waiting", Want: "≥",
			Got: fmt.Sprintf("%.2f %% vs %.2f %%", 100*b.Attainment(), 100*k.Attainment()), Met: b.Attainment() >= k.Attainment(), Known: true})
		g := b.GPUHours / k.GPUHours
		out = append(out, Goal{Name: "GPU-hours vs KEDA on vllm:num_requests_waiting", Want: "≤ 0.9×",
			Got: fmt.Sprintf("%.2f× (%.1f vs %.1f)", g, b.GPUHours, k.GPUHours), Met: g <= 0.9, Known: true})
	}
	for _, t := range r.Training {
		if t.Policy == string(PolicyBerth) {
			out = append(out, Goal{Name: "idle GPU-hours from partial gangs", Want: "0",
				Got: fmt.Sprintf("%.2f", t.PartialIdleGPUHours), Met: t.PartialIdleGPUHours == 0, Known: true})
		}
	}
	return out
}

// Write writes report.md and its plots into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report folder: %w", err)
	}
	plots, err := r.plots(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	err = r.Markdown(f, plots)
	return errors.Join(err, f.Close())
}

// Markdown writes the report's tables, the goals and links to plots (file names in dir).
func (r *Report) Markdown(w io.Writer, plots []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# berth simulate\n\n")
	if len(r.Inference) > 0 {
		f := r.Fleet
		fmt.Fprintf(&b, "## Inference\n\nRequests: %s.\n\n", r.Requests)
		fmt.Fprintf(&b, "Fleet: %s, %d GPU and %.0f cores per replica on %s nodes (%s), node launch %s, image pull %s (once per node) and model load %s (every pod), %d–%d replicas, %s routing, drain %s, %s after %s; the first %s is a warm-up, not measured. SLO: TTFT ≤ %s and mean ITL ≤ %s per request; clients give up after %s and the engine aborts their requests. Unattainable requests have a prompt whose prefill alone on an idle replica misses the TTFT SLO.\n\n",
			f.Engine.Model, f.GPUsPerReplica, f.ReplicaCPU, f.Family.Name, sizeNames(f), f.NodeLaunch, f.ImagePull, f.ModelLoad, f.Min, f.Max, f.routing(), f.DrainTimeout, f.Consolidation, f.ConsolidateAfter, f.WarmUp, f.SLO.TTFT, f.SLO.ITL, f.SLO.Timeout)
		inferenceTable(&b, r.Inference)
		fmt.Fprintf(&b, "\nPolicies:\n\n")
		for _, res := range r.Inference {
			fmt.Fprintf(&b, "- **%s**: %s\n", res.Autoscaler, r.Policies[res.Autoscaler])
		}
	}
	if len(r.Inference) > 0 {
		scaleUpTable(&b, r.Inference, r.Bursts, r.Fleet.WarmUp)
	}
	if len(r.Frontier) > 0 {
		frontierTable(&b, r.Frontier, r.Inference)
	}
	if len(r.BurstBlind) > 0 {
		burstBlindTable(&b, r.BurstBlind, r.Inference, r.inference((&Oracle{}).Name()))
	}
	if len(r.Consolidation) > 0 && r.ConsolidationFleet != nil {
		f := r.ConsolidationFleet
		fmt.Fprintf(&b, "\n## Consolidation\n\nberth on %s nodes (up to %d replicas per node) under Karpenter's %s after %s, without berth's guard and with it:\n\n",
			f.Family.Name, f.maxSlots(), WhenEmptyOrUnderutilized, f.ConsolidateAfter)
		inferenceTable(&b, r.Consolidation)
	}
	if len(r.Training) > 0 {
		c := r.Cluster
		fmt.Fprintf(&b, "\n## Training\n\nJobs: %s.\n\nCluster: %s (%d GPUs, %s per node-hour), NodePool limit %d GPUs, node launch %s, %s after %s, checkpoints every %s, rendezvous timeout %s, berth's provisioning timeout %s.\n\n",
			r.Jobs, c.Family.InstanceType(c.Size), c.Size.GPUs, usd(c.Size.OnDemandUSD), c.LimitGPUs, c.NodeLaunch, c.Consolidation, c.ConsolidateAfter, c.CheckpointEvery, c.RendezvousTimeout, c.ProvisioningTimeout)
		b.WriteString("| policy | jobs done | wait p50 | wait p95 | mean JCT | GPU-hours | busy | idle in partial gangs | held for gangs | booting | free | lost to evictions | evictions | rendezvous restarts | cost |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, t := range r.Training {
			fmt.Fprintf(&b, "| %s | %d/%d | %s | %s | %s | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.1f | %d | %d | %s |\n",
				t.Policy, t.Completed, t.Jobs-t.Unplaceable, t.WaitP50.Round(time.Second), t.WaitP95.Round(time.Second), t.JCTMean.Round(time.Second),
				t.GPUHours, t.BusyGPUHours, t.PartialIdleGPUHours, t.HeldGPUHours, t.BootingGPUHours, t.FreeGPUHours, t.LostGPUHours, t.Evictions, t.Restarts, usd(t.Dollars))
		}
	}
	if goals := r.Goals(); len(goals) > 0 {
		b.WriteString("\n## Goals\n\n| goal | target | this run | met |\n|---|---|---|---|\n")
		for _, g := range goals {
			met := "no"
			if g.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Want, g.Got, met)
		}
	}
	if len(plots) > 0 {
		b.WriteString("\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// frontierTable writes the static-N frontier and where each policy stands against it at its
// own GPU-hours.
func frontierTable(b *strings.Builder, fr Frontier, rs []*InferenceResult) {
	b.WriteString("\n### The static-N frontier\n\nFixed fleets of each size, warm from the start (the same warm-up left out): the SLO-violating attainable requests a fixed fleet has at each cost.\n\n")
	b.WriteString("| fixed fleet | GPU-hours | SLO attainment | SLO-violating (attainable) |\n|---|---|---|---|\n")
	for _, p := range fr {
		fmt.Fprintf(b, "| %d | %.1f | %.2f %% | %d |\n", p.N, p.GPUHours, 100*p.Attainment, p.AttainableViolation)
	}
	b.WriteString("\n| policy | GPU-hours | SLO-violating (attainable) | the frontier at those GPU-hours | vs the frontier |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		at, in := fr.At(r.GPUHours)
		note := ""
		if !in {
			note = " (outside the frontier's span: its nearest end)"
		}
		fmt.Fprintf(b, "| %s | %.1f | %d | %.1f%s | %s |\n", r.Autoscaler, r.GPUHours, r.AttainableViolations(), at, note, fewer(float64(r.AttainableViolations()), at))
	}
}

// burstBlindTable writes the burst-blind limit's runs, the least it pays for twice the oracle's
// violations, and what it pays for each policy's.
func burstBlindTable(b *strings.Builder, blind, rs []*InferenceResult, oracle *InferenceResult) {
	b.WriteString("\n### The burst-blind limit\n\nThe oracle's plan of the same day without its bursts, times a standing headroom, replayed on the day with them: the least a policy pays that meets each burst with what it held before it. A policy that cannot foresee a burst shorter than a cold start has little else: what it orders at the burst's start serves only after a cold start of the burst's requests has queued.\n\n")
	b.WriteString("| headroom | GPU-hours | SLO-violating (attainable) |\n|---|---|---|\n")
	for _, r := range blind {
		fmt.Fprintf(b, "| %s | %.1f | %d |\n", strings.TrimPrefix(r.Autoscaler, "burst-blind oracle "), r.GPUHours, r.AttainableViolations())
	}
	b.WriteString("\n| for | SLO-violating (attainable) | the burst-blind limit's GPU-hours | against it |\n|---|---|---|---|\n")
	// Where no run reached a count, the limit pays more than its costliest run: the ratios
	// against it are bounds (more, less).
	line := func(name string, v float64, note func(at float64, more, less string) string) {
		at, ok := GPUHoursFor(blind, v)
		if !ok {
			fmt.Fprintf(b, "| %s | %.0f | more than %.1f | %s |\n", name, v, at, note(at, "> ", "< "))
			return
		}
		fmt.Fprintf(b, "| %s | %.0f | %.1f | %s |\n", name, v, at, note(at, "", ""))
	}
	if oracle != nil {
		ov := float64(oracle.AttainableViolations())
		vsOracle := func(at float64, more, _ string) string {
			return fmt.Sprintf("%s%.2f× the oracle's %.1f GPU-hours", more, at/oracle.GPUHours, oracle.GPUHours)
		}
		line("the oracle's violations", ov, vsOracle)
		line("twice the oracle's", 2*ov, vsOracle)
	}
	for _, r := range rs {
		if r != oracle {
			line(r.Autoscaler, float64(r.AttainableViolations()), func(at float64, _, less string) string {
				return fmt.Sprintf("%s pays %s%.2f× (%.1f GPU-hours)", r.Autoscaler, less, r.GPUHours/at, r.GPUHours)
			})
		}
	}
}

// fewer says how many times fewer a than b is ("2.0× fewer", "1.5× more", "none (vs 3)").
func fewer(a, b float64) string {
	switch {
	case a == 0 && b == 0:
		return "equal (none)"
	case a == 0:
		return fmt.Sprintf("none (vs %.1f)", b)
	case a <= b:
		return fmt.Sprintf("%.2f× fewer", b/a)
	}
	return fmt.Sprintf("%.2f× more", a/b)
}

func inferenceTable(b *strings.Builder, rs []*InferenceResult) {
	b.WriteString("| policy | SLO attainment | SLO-violating | unattainable | failed | lost (to consolidation) | timed out | TTFT p50 | TTFT p95 | TTFT p99 | ITL p95 | ITL p99 | GPU-hours | cost | nodes launched |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %.2f %% | %d | %d | %d | %d (%d) | %d | %s | %s | %s | %s | %s | %.1f | %s | %d |\n",
			r.Autoscaler, 100*r.Attainment(), r.Violations(), r.Unattainable, r.Failed, r.Lost, r.LostToConsolidation, r.TimedOut,
			secs(r.TTFTP50), secs(r.TTFTP95), secs(r.TTFTP99), secs(r.ITLP95), secs(r.ITLP99), r.GPUHours, usd(r.Dollars), r.NodeLaunches)
	}
}

// sizeNames says which instance types Karpenter may launch for the fleet.
func sizeNames(f Fleet) string {
	var names []string
	for _, s := range f.sizes() {
		names = append(names, f.Family.InstanceType(s))
	}
	return "Karpenter picks among " + strings.Join(names, ", ")
}

func secs(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s < 1:
		return fmt.Sprintf("%.0f ms", 1000*s)
	}
	return fmt.Sprintf("%.2f s", s)
}

func usd(d float64) string { return fmt.Sprintf("$%.2f", d) }

// plots draws the report's figures into dir and returns their file names.
func (r *Report) plots(dir string) ([]string, error) {
	var names []string
	var errs []error
	add := func(name string, p *plot.Plot, err error) {
		if err == nil {
			err = p.Save(10*vg.Inch, 4*vg.Inch, filepath.Join(dir, name))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("plot %s: %w", name, err))
			return
		}
		names = append(names, name)
	}
	if len(r.Inference) > 0 {
		hours := r.Inference[0].Duration >= 3*time.Hour
		p, err := seriesPlot("Serving replicas", "replicas", r.Inference, hours, false, func(p Point) float64 { return p.Replicas })
		add("replicas.png", p, err)
		p, err = seriesPlot("Requests waiting in the engines' queues", "requests", r.Inference, hours, false, func(p Point) float64 { return p.Waiting })
		add("queue.png", p, err)
		p, err = seriesPlot("TTFT p95 per interval", "seconds (log)", r.Inference, hours, true, func(p Point) float64 { return p.TTFTP95 })
		add("ttft.png", p, err)
	}
	if len(r.Training) > 0 {
		p, err := trainingPlot(r.Training)
		add("training.png", p, err)
	}
	return names, errors.Join(errs...)
}

func seriesPlot(title, y string, rs []*InferenceResult, hours, logY bool, v func(Point) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = "minutes", y
	if hours {
		p.X.Label.Text = "hours"
	}
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	for i, r := range rs {
		var xys plotter.XYs
		for _, pt := range r.Series {
			val := v(pt)
			if math.IsNaN(val) || math.IsInf(val, 0) || (logY && val <= 0) {
				continue
			}
			x := pt.At.Minutes()
			if hours {
				x = pt.At.Hours()
			}
			xys = append(xys, plotter.XY{X: x, Y: val})
		}
		if err := addLine(p, xys, i, r.Autoscaler, false); err != nil {
			return nil, err
		}
	}
	p.Legend.Top = true
	switch {
	case !logY:
	case !(p.Y.Min > 0 && p.Y.Max >= p.Y.Min): // nothing drawn: a log axis needs a positive range
		p.Y.Min, p.Y.Max = 0.01, 1
	case p.Y.Max == p.Y.Min: // one value: the plot would widen it by ±1, below zero
		p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
	}
	return p, nil
}

// addLine draws xys in the i-th colour, solid with a legend entry or dashed without; no
// points, no line.
func addLine(p *plot.Plot, xys plotter.XYs, i int, name string, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	} else {
		p.Legend.Add(name, l)
	}
	p.Add(l)
	return nil
}

func trainingPlot(ts []*TrainingResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Training: GPUs computing (solid) and GPUs launched (dashed)"
	p.X.Label.Text, p.Y.Label.Text = "hours", "GPUs"
	for i, t := range ts {
		for _, dashed := range []bool{false, true} {
			var xys plotter.XYs
			for _, pt := range t.Series {
				y := pt.BusyGPUs
				if dashed {
					y = pt.NodeGPUs
				}
				xys = append(xys, plotter.XY{X: pt.At.Hours(), Y: y})
			}
			if err := addLine(p, xys, i, t.Policy, dashed); err != nil {
				return nil, err
			}
		}
	}
	p.Legend.Top = true
	return p, nil
}
