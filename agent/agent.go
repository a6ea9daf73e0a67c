package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Options configure the agent loop.
type Options struct {
	// Interval between health probes.
	Interval time.Duration
	// XIDHold is how long a non-fatal Xid keeps its GPU degraded after it was seen (fatal ones
	// are latched).
	XIDHold time.Duration
	// Hysteresis decides when a faulty node is healthy again.
	Hysteresis Hysteresis
	// ExitWithoutNVML makes Run return ErrNoNVML when NVML is absent; otherwise the agent
	// reports NVMLUnavailable on the node and idles until stopped.
	ExitWithoutNVML bool
	// Liveness, when set, gets a beat after every probe and every Interval while the agent
	// idles without NVML.
	Liveness *Liveness
	Clock    clock.Clock
}

func (o *Options) defaults() {
	if o.Interval == 0 {
		o.Interval = 30 * time.Second
	}
	if o.XIDHold == 0 {
		o.XIDHold = 10 * time.Minute
	}
	if o.Hysteresis.HealthyProbes == 0 {
		o.Hysteresis = DefaultHysteresis
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// beat records the loop's progress in o.Liveness, when set.
func (o *Options) beat() {
	if o.Liveness != nil {
		o.Liveness.Beat(o.Clock.Now())
	}
}

// Run probes the GPUs every Interval and publishes the verdict until ctx ends. Without NVML
// it reports GPUDegraded=True (NVMLUnavailable) and leaves AcceleratedHardwareReady alone: not
// seeing the GPUs says nothing about them.
func Run(ctx context.Context, lib nvml.Interface, pub *Publisher, o Options) error {
	o.defaults()
	logger := log.FromContext(ctx)
	r, err := Open(lib)
	if err != nil {
		nvmlUp.Set(0)
		logger.Error(err, "GPU health is not reported")
		if o.ExitWithoutNVML {
			return err
		}
		node, nerr := pub.Node(ctx)
		if nerr == nil {
			_, nerr = pub.Publish(ctx, node, Report{Degraded: NVMLCondition(err)})
		}
		if nerr != nil {
			logger.Error(nerr, "reporting NVMLUnavailable")
		}
		gpuDegraded.Set(1)
		for { // idle, alive
			o.beat()
			select {
			case <-ctx.Done():
				return nil
			case <-o.Clock.After(o.Interval):
			}
		}
	}
	defer r.Close()
	nvmlUp.Set(1)
	inv, err := r.Inventory()
	if err != nil {
		return fmt.Errorf("reading GPU inventory: %w", err)
	}
	logger.Info("GPU inventory", "gpus", len(inv.GPUs), "driver", inv.DriverVersion, "cuda", inv.CUDAVersion)

	l := &loop{r: r, pub: pub, o: o, inv: inv, xids: &xidLog{}}
	stop := make(chan struct{})
	defer close(stop)
	go superviseXIDWatch(func() error { return r.WatchXIDs(l.xids, o.Clock.Now, stop) }, o.Clock, stop, logger)
	for {
		if err := l.step(ctx); err != nil {
			probeErrors.Inc()
			logger.Error(err, "GPU health probe")
		}
		o.beat()
		select {
		case <-ctx.Done():
			return nil
		case <-o.Clock.After(o.Interval):
		}
	}
}

// loop is the agent's state between probes.
type loop struct {
	r        *Reader
	pub      *Publisher
	o        Options
	inv      Inventory
	xids     *xidLog
	st       State
	restored bool
	owner    string
}

// step reads the node, probes the GPUs and publishes the verdict once.
func (l *loop) step(ctx context.Context) error {
	node, err := l.pub.Node(ctx)
	if err != nil {
		return err
	}
	if !l.restored {
		// A fatal fault a previous agent saw on this boot stays: NVML's events are not replayed.
		if f := RestoredFatal(node); f != nil {
			l.st.Fatal = latch(l.st.Fatal, *f)
		}
		l.restored = true
	}
	now := l.o.Clock.Now()
	faults, err := l.r.Probe(l.xids, now, l.o.XIDHold, ExpectedGPUs(node))
	if err != nil {
		return fmt.Errorf("probing GPU health: %w", err)
	}
	l.st = Evaluate(l.st, faults, now, l.o.Hysteresis)
	recordProbe(l.inv, faults, l.st)
	rep := Report{Degraded: DegradedCondition(l.st, l.inv, l.o.Hysteresis), Labels: Labels(l.inv), Fatal: len(l.st.Fatal) > 0}
	if hw, ok := HardwareCondition(l.st, l.inv); ok {
		rep.Hardware = &hw
	}
	owner, err := l.pub.Publish(ctx, node, rep)
	if owner != l.owner {
		log.FromContext(ctx).Info("AcceleratedHardwareReady is written by another component; berth reports GPU faults in GPUDegraded and metrics only", "writer", owner)
		l.owner = owner
	}
	recordWriter(owner)
	if err != nil {
		return fmt.Errorf("publishing GPU health: %w", err)
	}
	return nil
}

// ExpectedGPUs is how many GPUs the node's instance type has (Karpenter's
// karpenter.k8s.aws/instance-gpu-count label), or 0 when unknown.
func ExpectedGPUs(node *corev1.Node) int {
	n, err := strconv.Atoi(node.Labels[awsv1.LabelInstanceGPUCount])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// OnceReport is what `berth agent --once` prints.
type OnceReport struct {
	Inventory Inventory `json:"inventory"`
	Faults    []Fault   `json:"faults"`
	// Hardware is AcceleratedHardwareReady as the agent would write it (nil: left alone).
	Hardware *Condition `json:"acceleratedHardwareReady,omitempty"`
	Degraded Condition  `json:"gpuDegraded"`
}

// Once reads inventory and health once (no Xid history: events only arrive while watching).
func Once(lib nvml.Interface, now time.Time) (OnceReport, error) {
	r, err := Open(lib)
	if err != nil {
		return OnceReport{}, err
	}
	defer r.Close()
	inv, err := r.Inventory()
	if err != nil {
		return OnceReport{}, fmt.Errorf("reading GPU inventory: %w", err)
	}
	faults, err := r.Probe(&xidLog{}, now, 0, 0)
	if err != nil {
		return OnceReport{}, fmt.Errorf("probing GPU health: %w", err)
	}
	st := Evaluate(State{}, faults, now, DefaultHysteresis)
	rep := OnceReport{Inventory: inv, Faults: faults, Degraded: DegradedCondition(st, inv, DefaultHysteresis)}
	if hw, ok := HardwareCondition(st, inv); ok {
		rep.Hardware = &hw
	}
	return rep, nil
}

// Print writes a report for humans, or JSON.
func (rep OnceReport) Print(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "driver %s, CUDA %s, %d GPUs\n", rep.Inventory.DriverVersion, rep.Inventory.CUDAVersion, len(rep.Inventory.GPUs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tMIG\tUUID")
	for _, g := range rep.Inventory.GPUs {
		fmt.Fprintf(tw, "%d\t%s\t%d MiB\t%v\t%s\n", g.Index, g.Name, g.MemoryMiB, g.MIGEnabled, g.UUID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range rep.Faults {
		fmt.Fprintf(w, "fault: %s\n", f)
	}
	if rep.Hardware != nil {
		fmt.Fprintf(w, "%s=%s (%s): %s\n", ConditionType, rep.Hardware.Status, rep.Hardware.Reason, rep.Hardware.Message)
	} else {
		fmt.Fprintf(w, "%s: not written (no GPUs seen)\n", ConditionType)
	}
	fmt.Fprintf(w, "%s=%s (%s): %s\n", DegradedConditionType, rep.Degraded.Status, rep.Degraded.Reason, rep.Degraded.Message)
	return nil
}

// IsNoNVML reports whether err means NVML is absent.
func IsNoNVML(err error) bool { return errors.Is(err, ErrNoNVML) }

// Backoff of the Xid watch's restarts.
const (
	xidWatchBackoffBase = time.Second
	xidWatchBackoffMax  = time.Minute
)

// superviseXIDWatch runs watch until stop is closed, starting it again after each error with a
// backoff (xidWatchBackoffBase doubling to xidWatchBackoffMax; a watch that ran for longer than
// the maximum starts the backoff over): an NVML event error (a driver reload, a GPU reset) no
// longer ends the watch for the agent's lifetime. berth_agent_xid_watch_up says whether it runs.
func superviseXIDWatch(watch func() error, clk clock.Clock, stop <-chan struct{}, logger logr.Logger) {
	backoff := xidWatchBackoffBase
	for {
		xidWatchUp.Set(1)
		started := clk.Now()
		err := watch()
		xidWatchUp.Set(0)
		select {
		case <-stop:
			return
		default:
		}
		if clk.Since(started) > xidWatchBackoffMax {
			backoff = xidWatchBackoffBase
		}
		xidWatchRestarts.Inc()
		logger.Error(err, "watching Xid events; restarting the watch", "in", backoff)
		select {
		case <-stop:
			return
		case <-clk.After(backoff):
		}
		backoff = min(2*backoff, xidWatchBackoffMax)
	}
}
