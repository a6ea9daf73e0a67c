package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Options configure the agent loop.
type Options struct {
	// Interval between health probes.
	Interval time.Duration
	// XIDHold is how long a critical Xid keeps its GPU faulty after it was seen.
	XIDHold time.Duration
	// Hysteresis decides when a faulty node is healthy again.
	Hysteresis Hysteresis
	// ExitWithoutNVML makes Run return ErrNoNVML when NVML is absent; otherwise the agent
	// reports NVMLUnavailable on the node and idles until stopped.
	ExitWithoutNVML bool
	Clock           clock.Clock
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

// Run probes the GPUs every Interval and publishes the verdict until ctx ends.
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
		if perr := pub.Publish(ctx, corev1.ConditionFalse, berthv1alpha1.ReasonNVMLUnavailable, err.Error(), nil); perr != nil {
			logger.Error(perr, "reporting NVMLUnavailable")
		}
		<-ctx.Done()
		return nil
	}
	defer r.Close()
	nvmlUp.Set(1)
	inv, err := r.Inventory()
	if err != nil {
		return fmt.Errorf("reading GPU inventory: %w", err)
	}
	logger.Info("GPU inventory", "gpus", len(inv.GPUs), "driver", inv.DriverVersion, "cuda", inv.CUDAVersion)

	xids := &xidLog{}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		if err := r.WatchXIDs(xids, o.Clock.Now, stop); err != nil {
			logger.Error(err, "watching Xid events; Xids are not reported")
		}
	}()
	var st State
	for {
		faults, err := r.Probe(xids, o.Clock.Now(), o.XIDHold)
		if err != nil {
			probeErrors.Inc()
			logger.Error(err, "probing GPU health")
		} else {
			st = Evaluate(st, faults, o.Clock.Now(), o.Hysteresis)
			recordProbe(inv, faults, st.Healthy)
			status, reason, msg := NodeCondition(st, inv, o.Hysteresis)
			if err := pub.Publish(ctx, status, reason, msg, Labels(inv)); err != nil {
				probeErrors.Inc()
				logger.Error(err, "publishing GPU health")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.Clock.After(o.Interval):
		}
	}
}

// Report is what `berth agent --once` prints.
type Report struct {
	Inventory Inventory `json:"inventory"`
	Faults    []Fault   `json:"faults"`
	Condition string    `json:"condition"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
}

// Once reads inventory and health once (no Xid history: events only arrive while watching).
func Once(lib nvml.Interface, now time.Time) (Report, error) {
	r, err := Open(lib)
	if err != nil {
		return Report{}, err
	}
	defer r.Close()
	inv, err := r.Inventory()
	if err != nil {
		return Report{}, fmt.Errorf("reading GPU inventory: %w", err)
	}
	faults, err := r.Probe(&xidLog{}, now, 0)
	if err != nil {
		return Report{}, fmt.Errorf("probing GPU health: %w", err)
	}
	st := Evaluate(State{}, faults, now, DefaultHysteresis)
	status, reason, msg := NodeCondition(st, inv, DefaultHysteresis)
	return Report{Inventory: inv, Faults: faults, Condition: string(status), Reason: reason, Message: msg}, nil
}

// Print writes a report for humans, or JSON.
func (rep Report) Print(w io.Writer, asJSON bool) error {
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
	fmt.Fprintf(w, "%s=%s (%s): %s\n", corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady), rep.Condition, rep.Reason, rep.Message)
	return nil
}

// IsNoNVML reports whether err means NVML is absent.
func IsNoNVML(err error) bool { return errors.Is(err, ErrNoNVML) }
