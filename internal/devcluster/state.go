// Package devcluster runs berth's local cluster for `berth dev up|down|status` and `make demo`:
// the test rig (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok, Karpenter's
// kwok provider) plus berth's own components, all on loopback, held by a background process
// that `berth dev down` stops.
package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultStateDir is where the dev cluster keeps its state when --state-dir is not given:
// $XDG_STATE_HOME/berth/dev, or ~/.local/state/berth/dev.
func DefaultStateDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "berth", "dev")
}

// State is what the background process records in <state dir>/state.json.
type State struct {
	// PID is the background process holding the cluster.
	PID int `json:"pid"`
	// Ready is true once every component is up.
	Ready bool `json:"ready"`
	// Error is why the cluster failed to come up, if it did.
	Error string `json:"error,omitempty"`
	// Kubeconfig is the admin kubeconfig written for users.
	Kubeconfig string `json:"kubeconfig"`
	// APIServer is the kube-apiserver URL.
	APIServer string `json:"apiServer"`
	// PodCIDR is the loopback range pods get their IPs from (one of its own per cluster).
	PodCIDR string `json:"podCIDR,omitempty"`
	// StartedAt is when the background process started.
	StartedAt time.Time `json:"startedAt"`
	// ReadyAfter is how long it took until Ready.
	ReadyAfter string `json:"readyAfter,omitempty"`
	// Endpoints are berth's own endpoints (controller metrics, …) by name.
	Endpoints map[string]string `json:"endpoints,omitempty"`
	// Components are the processes of the cluster.
	Components []ComponentState `json:"components"`
	// Pending are components not started yet, and why (KEDA while its build runs: `make demo`
	// starts the cluster before KEDA is built and starts KEDA once it is).
	Pending map[string]string `json:"pending,omitempty"`
	// LogDir holds one log file per component.
	LogDir string `json:"logDir"`
}

// ComponentState is one process of the dev cluster.
type ComponentState struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Log  string `json:"log"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// ReadState reads the state file; ok is false when there is none.
func ReadState(dir string) (State, bool, error) {
	data, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("reading dev cluster state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, false, fmt.Errorf("parsing %s: %w", statePath(dir), err)
	}
	return s, true, nil
}

// writeState replaces the state file atomically.
func writeState(dir string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	tmp := statePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, statePath(dir)); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}

// alive reports whether a process exists (and is not a zombie we could reap).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie still answers kill(0); check /proc where available.
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		for i := len(data) - 1; i > 0; i-- {
			if data[i] == ')' && i+2 < len(data) {
				return data[i+2] != 'Z'
			}
		}
	}
	return true
}
