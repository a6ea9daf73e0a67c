package agent

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoNVML means the NVML library could not be loaded or initialised (no driver, no GPU).
var ErrNoNVML = errors.New("NVML is not available (no NVIDIA driver or GPU on this node)")

// GPU is one device's inventory.
type GPU struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	MemoryMiB  uint64 `json:"memoryMiB"`
	MIGEnabled bool   `json:"migEnabled"`
}

// Inventory is what NVML reports about the node's GPUs.
type Inventory struct {
	DriverVersion string `json:"driverVersion"`
	CUDAVersion   string `json:"cudaVersion"`
	GPUs          []GPU  `json:"gpus"`
}

// Reader reads inventory and health through an NVML implementation (the real library, or
// go-nvml's mock servers in tests).
type Reader struct {
	lib nvml.Interface
}

// Open initialises NVML. A missing library or driver is ErrNoNVML, never a panic.
func Open(lib nvml.Interface) (r *Reader, err error) {
	defer func() {
		// The real binding panics when libnvidia-ml.so cannot be loaded.
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: %v", ErrNoNVML, p)
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %s", ErrNoNVML, nvml.ErrorString(ret))
	}
	return &Reader{lib: lib}, nil
}

// Close shuts NVML down.
func (r *Reader) Close() { _ = r.lib.Shutdown() }

// Inventory lists the GPUs.
func (r *Reader) Inventory() (Inventory, error) {
	var inv Inventory
	if v, ret := r.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := r.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return inv, fmt.Errorf("counting GPUs: %s", nvml.ErrorString(ret))
	}
	for i := range n {
		d, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return inv, fmt.Errorf("GPU %d: %s", i, nvml.ErrorString(ret))
		}
		g := GPU{Index: i}
		if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
			return inv, fmt.Errorf("GPU %d UUID: %s", i, nvml.ErrorString(ret))
		}
		g.Name, _ = d.GetName()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryMiB = mem.Total / (1 << 20)
		}
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			g.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv, nil
}
