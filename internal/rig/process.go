package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// process is one rig component running as a child in its own process group.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	// stopped is set when the rig (or a test through it) stopped the process on purpose.
	stopped atomic.Bool
}

// startProcess starts binary with args and env (appended to the current environment),
// sending stdout and stderr to logDir/name.log. The child gets its own process group and is
// killed by the kernel if the thread that started it dies (PR_SET_PDEATHSIG), so a crashed or
// SIGKILLed parent leaves no component behind.
func startProcess(name, binary string, args, env []string, logDir string) (*process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating log folder for %s: %w", name, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "=== %s %s %q\n", time.Now().Format(time.RFC3339), binary, args)

	p := &process{name: name, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	// Pdeathsig fires when the *thread* that forked the child exits, so fork from a thread that
	// stays alive for as long as the child runs: lock this goroutine to its thread until Wait.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = childAttributes()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s (%s): %w", name, binary, err)
			close(p.done)
			_ = logFile.Close()
			return
		}
		p.cmd = cmd
		started <- nil
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// pid is the child's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group.
func (p *process) stop(grace time.Duration) error {
	p.stopped.Store(true)
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := p.pid()
	signalGroup(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		signalGroup(pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything the component forked into its group goes too.
	signalGroup(pgid, syscall.SIGKILL)
	return nil
}

// kill sends SIGKILL to the process group at once (a crash, for the tests that need one) and
// waits until the process is gone.
func (p *process) kill() {
	p.stopped.Store(true)
	if done, _ := p.exited(); done {
		return
	}
	signalGroup(p.pid(), syscall.SIGKILL)
	<-p.done
}

// waitFor polls check until it returns nil, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited before it was %s (%w); see %s", p.name, what, err, p.logPath)
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not %s: %w (last check: %w); see %s", p.name, what, ctx.Err(), last, p.logPath)
		case <-tick.C:
		}
	}
}

// registry tracks live rigs so a signal handler can stop them all before the process exits.
var registry = struct {
	sync.Mutex
	rigs      map[*Rig]struct{}
	installed bool
}{rigs: map[*Rig]struct{}{}}

func track(r *Rig) {
	registry.Lock()
	defer registry.Unlock()
	registry.rigs[r] = struct{}{}
	if registry.installed || !r.opts.HandleSignals {
		return
	}
	registry.installed = true
	installSignalHandler(func() {
		registry.Lock()
		rigs := make([]*Rig, 0, len(registry.rigs))
		for r := range registry.rigs {
			rigs = append(rigs, r)
		}
		registry.Unlock()
		for _, r := range rigs {
			_ = r.Stop()
		}
	})
}

func untrack(r *Rig) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.rigs, r)
}

// errStopped is returned by operations on a rig that has been stopped.
var errStopped = errors.New("rig stopped")
