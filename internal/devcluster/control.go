package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Up starts the dev cluster in a background process running `berth dev serve` and returns once
// it is ready (or failed). If a cluster is already up it reports that and returns nil.
func Up(ctx context.Context, o Options, out io.Writer) error {
	o.defaults()
	if st, ok, err := ReadState(o.StateDir); err != nil {
		return err
	} else if ok && alive(st.PID) {
		fmt.Fprintf(out, "dev cluster already up (pid %d); kubeconfig: %s\n", st.PID, st.Kubeconfig)
		return nil
	} else if ok {
		// A previous cluster died without cleaning up: finish its cleanup first.
		if err := Down(o, io.Discard); err != nil {
			return fmt.Errorf("cleaning up a dead dev cluster: %w", err)
		}
	}
	if o.ToolsDir == "" {
		return errors.New("no tools folder: pass --tools-dir or set BERTH_TOOLS_DIR to the folder printed by hack/build-tools.sh (make demo does this)")
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return fmt.Errorf("creating state folder: %w", err)
	}
	logPath := filepath.Join(o.StateDir, "serve.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s: %w", logPath, err)
	}
	defer func() { _ = logFile.Close() }() // the child holds its own descriptor; ours only needs closing
	args := []string{"dev", "serve", "--state-dir=" + o.StateDir, "--tools-dir=" + o.ToolsDir,
		"--kubeconfig=" + o.Kubeconfig, "--node-ready-delay=" + o.NodeReadyDelay.String(), "--kueue=" + strconv.FormatBool(o.Kueue),
		"--generic-workload=" + strconv.FormatBool(o.GenericWorkload), "--dra=" + strconv.FormatBool(o.DRA)}
	cmd := exec.Command(o.BerthBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A new session: the cluster outlives this command and the terminal it ran in.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting background process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(out, "starting dev cluster (pid %d, log %s)...\n", cmd.Process.Pid, logPath)

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("dev cluster failed to start (%w):\n%s", err, tail(logPath, 20))
		case <-ctx.Done():
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
			return ctx.Err()
		case <-tick.C:
			st, ok, err := ReadState(o.StateDir)
			if err != nil || !ok || st.PID != cmd.Process.Pid {
				continue
			}
			if st.Error != "" {
				exitErr := <-exited
				return fmt.Errorf("dev cluster failed to start: %s (background process: %w)\nlogs: %s", st.Error, exitErr, st.LogDir)
			}
			if st.Ready {
				fmt.Fprintf(out, "dev cluster ready in %s\n", st.ReadyAfter)
				printStatus(out, st)
				return nil
			}
		}
	}
}

// Status prints what runs; ok is false when no cluster is up.
func Status(o Options, out io.Writer) (bool, error) {
	o.defaults()
	st, ok, err := ReadState(o.StateDir)
	if err != nil {
		return false, err
	}
	if !ok {
		fmt.Fprintf(out, "no dev cluster (state folder %s)\n", o.StateDir)
		return false, nil
	}
	printStatus(out, st)
	return alive(st.PID) && st.Ready, nil
}

func printStatus(out io.Writer, st State) {
	state := "up"
	switch {
	case !alive(st.PID):
		state = "dead (run 'berth dev down' to clean up)"
	case st.Error != "":
		state = "failed: " + st.Error
	case !st.Ready:
		state = "starting"
	}
	fmt.Fprintf(out, "dev cluster: %s (pid %d, since %s)\n", state, st.PID, st.StartedAt.Format(time.RFC3339))
	fmt.Fprintf(out, "api server:  %s\nkubeconfig:  %s   (export KUBECONFIG=%s)\nlogs:        %s\npod IPs:     %s\n", st.APIServer, st.Kubeconfig, st.Kubeconfig, st.LogDir, st.PodCIDR)
	for _, name := range slices.Sorted(maps.Keys(st.Pending)) {
		fmt.Fprintf(out, "%-19s not started: %s\n", name+":", st.Pending[name])
	}
	names := make([]string, 0, len(st.Endpoints))
	for name := range st.Endpoints {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(out, "%-19s %s\n", name+":", st.Endpoints[name])
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tSTATE\tLOG")
	for _, c := range st.Components {
		s := "running"
		if !alive(c.PID) {
			s = "exited"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Name, c.PID, s, c.Log)
	}
	_ = tw.Flush()
}

// Down stops the dev cluster and removes its state folder (and the kubeconfig it wrote). It
// succeeds when there is nothing to stop.
func Down(o Options, out io.Writer) error {
	o.defaults()
	st, ok, err := ReadState(o.StateDir)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintf(out, "no dev cluster running\n")
		return os.RemoveAll(o.StateDir)
	}
	if alive(st.PID) {
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
		deadline := time.Now().Add(60 * time.Second)
		for alive(st.PID) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(st.PID) {
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
		}
	}
	// Components die with the background process (parent-death signal); make sure anyway.
	for _, c := range st.Components {
		if alive(c.PID) {
			_ = syscall.Kill(-c.PID, syscall.SIGKILL)
			_ = syscall.Kill(c.PID, syscall.SIGKILL)
		}
	}
	for _, c := range st.Components {
		for i := 0; i < 50 && alive(c.PID); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(c.PID) {
			return fmt.Errorf("component %s (pid %d) is still running", c.Name, c.PID)
		}
	}
	if st.Kubeconfig != "" && !strings.HasPrefix(st.Kubeconfig, o.StateDir+string(os.PathSeparator)) {
		_ = os.Remove(st.Kubeconfig)
	}
	if err := os.RemoveAll(o.StateDir); err != nil {
		return fmt.Errorf("removing %s: %w", o.StateDir, err)
	}
	fmt.Fprintf(out, "dev cluster stopped; removed %s\n", o.StateDir)
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
