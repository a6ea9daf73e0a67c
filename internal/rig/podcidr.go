package rig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Pod IPs: kwok hands pod IPs out from a loopback range, so a local process (the vLLM emulator)
// can serve a fake pod's endpoints exactly where a client reaches them. Every rig on a machine
// gets a range of its own (127.<n>.0.0/16), so rigs running at once — test packages in
// parallel, `berth dev up` beside a test run — never give two pods the same address. The range
// is held by an exclusive lock on a file in the temporary folder for the rig's lifetime.
// 127.0.0.0/16 is left alone: 127.0.0.1 serves the control plane, 127.0.0.2 is the kwok node
// IP, and the scaler's tests use 127.0.100.x.

// podCIDRLocks bounds the ranges tried: 127.1 up to 127.254.
const firstPodRange, lastPodRange = 1, 254

// errRangeTaken means another rig holds a range's lock.
var errRangeTaken = errors.New("range taken")

// podRange is a pod IP range held by this process.
type podRange struct {
	cidr    string
	release func()
}

// allocatePodRange takes the first free 127.<n>.0.0/16.
func allocatePodRange() (podRange, error) {
	for n := firstPodRange; n <= lastPodRange; n++ {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("berth-rig-pods-127.%d.lock", n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return podRange{}, fmt.Errorf("opening pod range lock %s: %w", path, err)
		}
		if err := lockExclusive(f); err != nil {
			_ = f.Close()
			if errors.Is(err, errRangeTaken) {
				continue
			}
			return podRange{}, fmt.Errorf("locking %s: %w", path, err)
		}
		return podRange{cidr: fmt.Sprintf("127.%d.0.0/16", n), release: func() { _ = f.Close() }}, nil
	}
	return podRange{}, fmt.Errorf("every pod IP range 127.%d-%d.0.0/16 is held by another rig", firstPodRange, lastPodRange)
}
