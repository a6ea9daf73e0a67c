package scheduling

import (
	"context"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
)

// The class's own selectors, once per device: the allocator evaluates a DeviceClass's CEL
// selectors on every device it considers, in every call, and a cycle calls it on the same
// nodes over and over. When every claim of a call asks for one class, the devices offered are
// cut to those the class selects — judged once per device per snapshot, with the same CEL
// library and cache the allocator uses, on the same input it builds (driver, attributes,
// capacity) — and the allocator is given the class without its selectors, so it judges the
// claims' own selectors and everything else as before. A device whose class selector fails to
// evaluate leaves the call as it was: the allocator then reports the error itself.

// SelectionCache keeps, across snapshots, which devices of each ResourceSlice a DeviceClass's
// selectors match: a slice and a class at one resourceVersion select the same devices, and
// their selectors are most of what placing a member that claims devices costs. One cache per
// controller, given to each snapshot (DynamicResources.Selections); safe for concurrent use.
// Entries of versions gone are dropped once they outnumber the live ones.
type SelectionCache struct {
	mu      sync.Mutex
	entries map[selectionKey][]bool
}

// NewSelectionCache makes an empty cache.
func NewSelectionCache() *SelectionCache {
	return &SelectionCache{entries: map[selectionKey][]bool{}}
}

// selectionKey is one class at one version and one slice at one version.
type selectionKey struct {
	class, slice               types.UID
	classVersion, sliceVersion string
}

// keyOf is the cache key of c and sl; ok is false when either has no UID or version (an
// object not read from the API server), which is then not cached.
func keyOf(c *resourceapi.DeviceClass, sl *resourceapi.ResourceSlice) (selectionKey, bool) {
	k := selectionKey{class: c.UID, classVersion: c.ResourceVersion, slice: sl.UID, sliceVersion: sl.ResourceVersion}
	return k, k.class != "" && k.classVersion != "" && k.slice != "" && k.sliceVersion != ""
}

// sweep empties the cache when it holds more than twice live entries (the slices times the
// classes of the snapshot starting): the rest are of versions gone.
func (c *SelectionCache) sweep(live int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) > 2*live+64 {
		clear(c.entries)
	}
}

func (c *SelectionCache) get(k selectionKey) ([]bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.entries[k]
	return m, ok
}

func (c *SelectionCache) put(k selectionKey, m []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[k] = m
}

// classSelection is one class's selection of one node's devices.
type classSelection struct {
	// mask marks, in d.ids' order, the node's devices the class selects.
	mask []bool
	// failed: a selector did not compile or evaluate on some device, or the node's devices
	// share counters (offer the node as it is).
	failed bool
}

// soleClass is the class every claim of todo asks for, when each is one exact count (the
// calls plainCounts admits) and they all name the same class; "" otherwise.
func soleClass(todo []*resourceapi.ResourceClaim) string {
	name := ""
	for _, c := range todo {
		e := c.Spec.Devices.Requests[0].Exactly
		if name != "" && e.DeviceClassName != name {
			return ""
		}
		name = e.DeviceClassName
	}
	return name
}

// selected marks node's devices class selects (in d.ids' order), computed once per snapshot;
// ok is false when the cut cannot be made (unknown class, a class without selectors, a
// selector error, shared counters).
func (d *draState) selected(class, node string) ([]bool, bool) {
	c := d.classes[class]
	if c == nil || len(c.Spec.Selectors) == 0 {
		return nil, false
	}
	if d.ofClass == nil {
		d.ofClass = map[string]map[string]classSelection{}
	}
	byNode := d.ofClass[class]
	if byNode == nil {
		byNode = map[string]classSelection{}
		d.ofClass[class] = byNode
	}
	sel, ok := byNode[node]
	if !ok {
		sel = d.selectFor(c, d.byNode[node])
		byNode[node] = sel
	}
	return sel.mask, !sel.failed
}

// selectFor marks the devices of slices that c's selectors all match.
func (d *draState) selectFor(c *resourceapi.DeviceClass, in []*resourceapi.ResourceSlice) classSelection {
	var exprs []cel.CompilationResult
	var mask []bool
	for _, sl := range in {
		k, cacheable := keyOf(c, sl)
		if cacheable && d.selections != nil {
			if m, ok := d.selections.get(k); ok {
				mask = append(mask, m...)
				continue
			}
		}
		if exprs == nil {
			for _, s := range c.Spec.Selectors {
				if s.CEL == nil {
					return classSelection{failed: true}
				}
				e := d.cel.GetOrCompile(s.CEL.Expression)
				if e.Error != nil {
					return classSelection{failed: true}
				}
				exprs = append(exprs, e)
			}
		}
		m, ok := sliceSelection(exprs, sl)
		if !ok {
			return classSelection{failed: true}
		}
		if cacheable && d.selections != nil {
			d.selections.put(k, m)
		}
		mask = append(mask, m...)
	}
	return classSelection{mask: mask}
}

// sliceSelection marks the devices of sl that exprs all match; ok is false when one fails to
// evaluate or the slice's devices share counters (read from the whole slice).
func sliceSelection(exprs []cel.CompilationResult, sl *resourceapi.ResourceSlice) ([]bool, bool) {
	if len(sl.Spec.SharedCounters) > 0 {
		return nil, false
	}
	mask := make([]bool, len(sl.Spec.Devices))
	for i := range sl.Spec.Devices {
		dev := &sl.Spec.Devices[i]
		if len(dev.ConsumesCounters) > 0 {
			return nil, false
		}
		mask[i] = true
		for _, e := range exprs {
			ok, _, err := e.DeviceMatches(context.Background(), cel.Device{Driver: sl.Spec.Driver, Attributes: dev.Attributes, Capacity: dev.Capacity})
			if err != nil {
				return nil, false
			}
			if !ok {
				mask[i] = false
				break
			}
		}
	}
	return mask, true
}

// withoutSelectors is the classes with class's selectors dropped (the devices offered are
// already those it selects), made once per snapshot.
func (d *draState) withoutSelectors(class string) DeviceClassLister {
	if l, ok := d.bare[class]; ok {
		return l
	}
	if d.bare == nil {
		d.bare = map[string]DeviceClassLister{}
	}
	l := make(DeviceClassLister, len(d.classes))
	for k, v := range d.classes {
		l[k] = v
	}
	c := d.classes[class].DeepCopy()
	c.Spec.Selectors = nil
	l[class] = c
	d.bare[class] = l
	return l
}
