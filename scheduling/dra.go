package scheduling

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
)

// DRAFeatures are the structured allocator's features placement uses: those kube-scheduler
// 1.37 enables by default that the allocator's stable implementation supports (admin access,
// prioritized lists, partitionable devices, device taints).
var DRAFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}

// DynamicResources are the cluster's dynamic resources a snapshot places members' resource
// claims with: the devices drivers publish, the classes claims name, the claims that exist
// (allocated or not) and the templates members' claims are made from.
type DynamicResources struct {
	Slices    []*resourceapi.ResourceSlice
	Classes   []*resourceapi.DeviceClass
	Claims    []*resourceapi.ResourceClaim
	Templates []*resourceapi.ResourceClaimTemplate
	// PodGroups are Kubernetes' native PodGroups (scheduling.k8s.io/v1beta1) of pods that
	// claim devices: a pod's claim that matches one of its PodGroup's spec.resourceClaims is
	// the group's one claim, shared by every member (DRAWorkloadResourceClaims).
	PodGroups []*schedulingv1beta1.PodGroup
	// Selections, when set, keeps which devices each class selects across snapshots (one per
	// controller); without it each snapshot judges them again.
	Selections *SelectionCache
}

// draState is a snapshot's dynamic resources and its device ledger: which devices are
// allocated (by the cluster's claims) or promised (by placements assumed in the snapshot).
type draState struct {
	classes   DeviceClassLister
	byNode    map[string][]*resourceapi.ResourceSlice
	anyNode   []*resourceapi.ResourceSlice     // slices for all nodes or a node selector
	ids       map[string][]structured.DeviceID // the devices of byNode's slices
	claims    map[string]*resourceapi.ResourceClaim
	templates map[string]*resourceapi.ResourceClaimTemplate
	podGroups map[string]*schedulingv1beta1.PodGroup
	cel       *cel.Cache
	// allocated are the devices taken: by allocated claims, by the claims of pods that count
	// against a node whose claims are not allocated yet (berth's promise, replayed every
	// snapshot), and by placements assumed or reserved in this snapshot.
	allocated sets.Set[structured.DeviceID]
	// resolved memoizes claimsOf: a pod's claims resolve the same way for the snapshot's life
	// (the claims and templates do not change in it), and are read for every node tried.
	resolved map[*corev1.Pod]resolvedClaims
	// promised are claims placements in this snapshot allocated (shared claims the next
	// member must follow), by claim key.
	promised map[string]*resourceapi.AllocationResult
	// full are, per class key, the nodes where a member of the class could not be allocated
	// against the ledger alone. The ledger only grows within a snapshot, so such a node stays
	// full for the class: on a filling cluster each member then costs one allocation, not one
	// per full node.
	full map[string][]bool
	// orderBuf is deviceOrder's scratch: the keys of the one node order in use.
	orderBuf []orderKey
	// ofClass are, per class and node, the node's slices cut to the devices the class's
	// selectors match; bare, per class, the classes with that class's selectors dropped
	// (dra_class.go). Both are made once per snapshot, as needed.
	// uncut are the nodes a pool of which names a device twice: the allocator refuses such a
	// pool, so its slices are offered whole there — cutting taken or unselected devices could
	// drop a duplicate and make it look valid.
	uncut      map[string]bool
	ofClass    map[string]map[string]classSelection
	bare       map[string]DeviceClassLister
	selections *SelectionCache
	// podDevices are the devices each pod alone holds, by pod UID: those of allocated claims
	// reserved for it alone, and those replayed for it on its node. Without gives them back.
	podDevices map[types.UID][]structured.DeviceID
}

func (d *draState) clone() *draState {
	c := *d
	c.allocated = d.allocated.Clone()
	c.promised = make(map[string]*resourceapi.AllocationResult, len(d.promised))
	for k, v := range d.promised {
		c.promised[k] = v
	}
	c.full = map[string][]bool{} // a clone may diverge: it learns its own
	c.orderBuf = nil             // its own scratch
	c.ofClass, c.bare = nil, nil // its own memos
	return &c
}

// fullFor is, by node index, whether a member of class key is known not to be allocatable
// there; n is the snapshot's node count.
func (d *draState) fullFor(key string, n int) []bool {
	f := d.full[key]
	if f == nil {
		f = make([]bool, n)
		d.full[key] = f
	}
	return f
}

// DeviceClassLister serves DeviceClasses, by name, to the structured allocator.
type DeviceClassLister map[string]*resourceapi.DeviceClass

// List is every class, by name.
func (l DeviceClassLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get is the class of that name, or a NotFound error.
func (l DeviceClassLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// SetDynamicResources gives the snapshot the cluster's dynamic resources, so that members
// with resource claims are placed where the structured allocator (the one kube-scheduler
// uses) can allocate their claims. Devices the cluster's claims hold are taken; so are the
// devices of every pod already counted against a node whose claims are not allocated yet —
// a member pinned by an earlier admission that kube-scheduler has not bound — allocated now
// on its node, all of a node's such pods together, so no device is promised twice across
// cycles. Where they cannot be replayed every device of their node counts as taken; it returns,
// joined, why (an invalid claim, one the cache does not have yet).
func (s *Snapshot) SetDynamicResources(res DynamicResources) error {
	d := &draState{classes: DeviceClassLister{}, byNode: map[string][]*resourceapi.ResourceSlice{}, ids: map[string][]structured.DeviceID{},
		claims: map[string]*resourceapi.ResourceClaim{}, templates: map[string]*resourceapi.ResourceClaimTemplate{},
		cel: cel.NewCache(100, cel.Features{}), allocated: sets.New[structured.DeviceID](),
		promised: map[string]*resourceapi.AllocationResult{}, full: map[string][]bool{}, resolved: map[*corev1.Pod]resolvedClaims{}}
	for _, c := range res.Classes {
		d.classes[c.Name] = c
	}
	if d.selections = res.Selections; d.selections != nil {
		d.selections.sweep(len(res.Slices) * len(res.Classes))
	}
	for _, sl := range res.Slices {
		if sl.Spec.NodeName != nil && *sl.Spec.NodeName != "" {
			d.byNode[*sl.Spec.NodeName] = append(d.byNode[*sl.Spec.NodeName], sl)
			for _, dev := range sl.Spec.Devices {
				d.ids[*sl.Spec.NodeName] = append(d.ids[*sl.Spec.NodeName], structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name))
			}
		} else {
			d.anyNode = append(d.anyNode, sl)
		}
	}
	d.uncut = nodesWithDuplicateDevices(d.ids)
	for _, t := range res.Templates {
		d.templates[t.Namespace+"/"+t.Name] = t
	}
	d.podGroups = make(map[string]*schedulingv1beta1.PodGroup, len(res.PodGroups))
	for _, pg := range res.PodGroups {
		d.podGroups[pg.Namespace+"/"+pg.Name] = pg
	}
	d.podDevices = map[types.UID][]structured.DeviceID{}
	for _, c := range res.Claims {
		d.claims[c.Namespace+"/"+c.Name] = c
		if c.Status.Allocation != nil {
			addDevices(d.allocated, c.Status.Allocation)
			if rf := c.Status.ReservedFor; len(rf) == 1 && rf[0].Resource == "pods" && rf[0].APIGroup == "" {
				d.podDevices[rf[0].UID] = appendDevices(d.podDevices[rf[0].UID], c.Status.Allocation)
			}
		}
	}
	s.dra = d
	var errs []error
	for _, n := range s.nodes {
		var ps []*corev1.Pod
		for _, p := range n.pods {
			if len(p.Spec.ResourceClaims) > 0 {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			continue
		}
		// The node's pods together, in one call: one at a time, in node order, a pod that
		// could take any device took the one another pod alone could use, and that one's
		// devices were then counted nowhere — promised again.
		allocs, _, err := s.allocateMany(n, ps, nil)
		if err == nil && allocs == nil && len(ps) > 1 {
			allocs, err = s.replayOneByOne(n, ps)
		}
		if err != nil || allocs == nil {
			if err != nil {
				errs = append(errs, fmt.Errorf("counting the devices of the pods on node %s: %w", n.Name(), err))
			}
			// Devices held that cannot be told apart: every device of the node counts as taken
			// until they are (the pods bind, their claims are allocated) — never promised twice.
			d.allocated.Insert(d.ids[n.Name()]...)
			continue
		}
		for i, p := range ps {
			if allocs[i] != nil && p.UID != "" {
				d.podDevices[p.UID] = append(d.podDevices[p.UID], allocs[i].devices...)
			}
		}
	}
	return errors.Join(errs...)
}

// replayOneByOne is SetDynamicResources' replay of a node's pods one at a time, where one call
// for all of them ran out of time: nil when some pod's claims cannot be allocated (its devices
// could then be anywhere on the node).
func (s *Snapshot) replayOneByOne(n *NodeState, ps []*corev1.Pod) ([]*draAlloc, error) {
	allocs := make([]*draAlloc, len(ps))
	for i, p := range ps {
		a, _, err := s.allocateOn(n, p, nil)
		if err != nil || a == nil {
			return nil, err
		}
		allocs[i] = a
	}
	return allocs, nil
}

// appendDevices appends the devices an allocation takes (admin access takes none) to ids.
func appendDevices(ids []structured.DeviceID, a *resourceapi.AllocationResult) []structured.DeviceID {
	for _, r := range a.Devices.Results {
		if r.AdminAccess == nil || !*r.AdminAccess {
			ids = append(ids, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return ids
}

// release gives back the devices pods alone hold (Snapshot.Without): a gang's seats hold
// devices through their own claims, which its members will have.
func (d *draState) release(pods []*corev1.Pod) {
	for _, p := range pods {
		for _, id := range d.podDevices[p.UID] {
			d.allocated.Delete(id)
		}
	}
	d.full = map[string][]bool{} // nodes full before may have room now
}

// addDevices marks the devices of an allocation taken (admin access does not take a device).
func addDevices(set sets.Set[structured.DeviceID], a *resourceapi.AllocationResult) {
	set.Insert(appendDevices(nil, a)...)
}

// memberClaim is one of a member's resource claims as placement sees it.
type memberClaim struct {
	// key identifies the claim: namespace/name of the ResourceClaim, also for a claim not
	// created yet from a template (the name kube-controller-manager will give it is not
	// known, so a pod-scoped key stands in).
	key   string
	claim *resourceapi.ResourceClaim
	// named: the pod names the claim (spec.resourceClaims[].resourceClaimName), which other
	// pods may name too; otherwise it is the pod's own, made from a template.
	named bool
}

// claimsOf resolves p's resource claims. A claim that is missing (a named claim not created,
// a template that does not exist) is an error saying what to create; a claim its template
// will make but that is not made yet is placed from the template's spec.
func (d *draState) claimsOf(p *corev1.Pod) ([]memberClaim, error) {
	if mc, ok := d.resolved[p]; ok {
		return mc.claims, mc.err
	}
	claims, err := d.resolve(p)
	d.resolved[p] = resolvedClaims{claims, err}
	return claims, err
}

// resolvedClaims are a pod's claims as claimsOf resolved them.
type resolvedClaims struct {
	claims []memberClaim
	err    error
}

func (d *draState) resolve(p *corev1.Pod) ([]memberClaim, error) {
	out := make([]memberClaim, 0, len(p.Spec.ResourceClaims))
	for i := range p.Spec.ResourceClaims {
		pc := &p.Spec.ResourceClaims[i]
		if mc, ok, err := d.groupClaim(p, pc); ok || err != nil {
			if err != nil {
				return nil, err
			}
			if mc.claim != nil { // nil: the group's claim deliberately not made
				out = append(out, mc)
			}
			continue
		}
		name, err := claimName(p, pc)
		switch {
		case err == nil && name == nil:
			continue // deliberately not created: nothing to allocate
		case err == nil:
			c, ok := d.claims[p.Namespace+"/"+*name]
			if !ok {
				return nil, fmt.Errorf("waits for ResourceClaim %s/%s (spec.resourceClaims %q), which does not exist", p.Namespace, *name, pc.Name)
			}
			out = append(out, memberClaim{key: p.Namespace + "/" + *name, claim: c, named: pc.ResourceClaimName != nil})
		case errors.Is(err, resourceclaim.ErrClaimNotFound) && pc.ResourceClaimTemplateName != nil:
			t, ok := d.templates[p.Namespace+"/"+*pc.ResourceClaimTemplateName]
			if !ok {
				return nil, fmt.Errorf("waits for ResourceClaimTemplate %s/%s (spec.resourceClaims %q), which does not exist", p.Namespace, *pc.ResourceClaimTemplateName, pc.Name)
			}
			key := "pod:" + p.Namespace + "/" + p.Name + "/" + pc.Name
			c := &resourceapi.ResourceClaim{Spec: t.Spec.Spec}
			c.Namespace, c.Name, c.UID = p.Namespace, p.Name+"-"+pc.Name, types.UID(key)
			out = append(out, memberClaim{key: key, claim: c})
		default:
			return nil, fmt.Errorf("spec.resourceClaims %q: %w", pc.Name, err)
		}
	}
	return out, nil
}

// groupClaim resolves pc when it is the claim of p's native PodGroup (the library's own rule,
// resourceclaim.BindTo): one claim every member shares — named by the group, or made for the
// group from a template (its name in the group's status once made). ok is false for a claim of
// p's own; ok with no claim is the group's claim deliberately not made (nothing to allocate).
func (d *draState) groupClaim(p *corev1.Pod, pc *corev1.PodResourceClaim) (memberClaim, bool, error) {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return memberClaim{}, false, nil
	}
	pg := d.podGroups[p.Namespace+"/"+*p.Spec.SchedulingGroup.PodGroupName]
	if pg == nil || len(pg.Spec.ResourceClaims) == 0 {
		return memberClaim{}, false, nil
	}
	to, err := resourceclaim.BindTo(p, pg, pc)
	if err != nil || to.Resource != "podgroups" || to.APIGroup != schedulingv1beta1.GroupName {
		return memberClaim{}, false, nil // the pod's own claim, resolved as such
	}
	for _, gc := range pg.Spec.ResourceClaims {
		if gc.Name != pc.Name {
			continue
		}
		name, _, err := resourceclaim.NameFromPodGroup(pg, &gc)
		switch {
		case err == nil && name == nil:
			return memberClaim{}, true, nil // deliberately not made: nothing to allocate
		case err == nil:
			c, ok := d.claims[p.Namespace+"/"+*name]
			if !ok {
				return memberClaim{}, true, fmt.Errorf("waits for ResourceClaim %s/%s (PodGroup %s's claim %q), which does not exist", p.Namespace, *name, pg.Name, gc.Name)
			}
			return memberClaim{key: p.Namespace + "/" + *name, claim: c, named: true}, true, nil
		case errors.Is(err, resourceclaim.ErrClaimNotFound) && gc.ResourceClaimTemplateName != nil:
			t, ok := d.templates[p.Namespace+"/"+*gc.ResourceClaimTemplateName]
			if !ok {
				return memberClaim{}, true, fmt.Errorf("waits for ResourceClaimTemplate %s/%s (PodGroup %s's claim %q), which does not exist", p.Namespace, *gc.ResourceClaimTemplateName, pg.Name, gc.Name)
			}
			key := "podgroup:" + p.Namespace + "/" + pg.Name + "/" + gc.Name
			c := &resourceapi.ResourceClaim{Spec: t.Spec.Spec}
			c.Namespace, c.Name, c.UID = p.Namespace, pg.Name+"-"+gc.Name, types.UID(key)
			return memberClaim{key: key, claim: c, named: true}, true, nil
		default:
			return memberClaim{}, true, fmt.Errorf("PodGroup %s's claim %q: %w", pg.Name, gc.Name, err)
		}
	}
	return memberClaim{}, false, nil
}

// claimName is resourceclaim.Name without building an error for the common case of a claim
// its template has not made yet (most members, every cycle).
func claimName(p *corev1.Pod, pc *corev1.PodResourceClaim) (*string, error) {
	if pc.ResourceClaimTemplateName != nil && pc.ResourceClaimName == nil &&
		!slices.ContainsFunc(p.Status.ResourceClaimStatuses, func(st corev1.PodResourceClaimStatus) bool { return st.Name == pc.Name }) {
		return nil, resourceclaim.ErrClaimNotFound
	}
	name, _, err := resourceclaim.Name(p, pc)
	return name, err
}

// draKey is what of p's claims decides where it may go, for its class key: the claims by
// what they are made from, and the native PodGroup whose claims they may be. Members of one
// template are alike; so are members sharing a claim.
func draKey(p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("dra:")
	if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		// A claim may be the native PodGroup's, shared: members of other groups are not alike.
		b.WriteString("group/" + *sg.PodGroupName + ";")
	}
	for _, pc := range p.Spec.ResourceClaims {
		b.WriteString(pc.Name)
		switch {
		case pc.ResourceClaimName != nil:
			b.WriteString("=claim/" + *pc.ResourceClaimName)
		case pc.ResourceClaimTemplateName != nil:
			b.WriteString("=template/" + *pc.ResourceClaimTemplateName)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// namesClaims reports whether p names a ResourceClaim (which other pods may name too) rather
// than having its own made from a template.
func namesClaims(p *corev1.Pod) bool {
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			return true
		}
	}
	return false
}

// draAlloc is what one member's placement took: devices, and the claims it allocated.
type draAlloc struct {
	devices []structured.DeviceID
	claims  map[string]*resourceapi.AllocationResult
}

// allocateOn allocates p's claims on node n against the snapshot's ledger, in which an
// attempt's devices are while it runs (extra: its promised shared claims; nil: none). It
// returns nil and no error when they cannot be allocated there, and an error when the claims
// or the cluster's dynamic resources are invalid (a CEL selector that does not compile, a
// missing class…). With extra nil the allocation is committed to the ledger
// (SetDynamicResources' replay). full is true when every claim of p was to be allocated and
// the devices for them are not free on n: no member like p fits there while the ledger only
// grows.
func (s *Snapshot) allocateOn(n *NodeState, p *corev1.Pod, extra *draExtra) (alloc *draAlloc, full bool, err error) {
	allocs, full, err := s.allocateMany(n, []*corev1.Pod{p}, extra)
	if allocs == nil {
		return nil, full, err
	}
	return allocs[0], false, nil
}

// batchClaims are the claims a batch of members still needs allocated: todo, each claim's
// index in todo by key (at), each member's claim keys (mine), and whether every claim of a
// single member is in todo (whole: a failure then says the node is full for members like it).
type batchClaims struct {
	todo  []*resourceapi.ResourceClaim
	at    map[string]int
	mine  [][]string
	whole bool
}

// pending collects what ps still need allocated on n. ok is false when a claim of theirs is
// allocated (or promised) on another node: they cannot go to n at all.
func (d *draState) pending(n *NodeState, ps []*corev1.Pod, extra *draExtra) (b batchClaims, ok bool, err error) {
	b = batchClaims{at: map[string]int{}, mine: make([][]string, len(ps)), whole: len(ps) == 1}
	for i, p := range ps {
		claims, err := d.claimsOf(p)
		if err != nil {
			return b, false, err
		}
		for _, mc := range claims {
			alloc := mc.claim.Status.Allocation
			if alloc == nil {
				alloc = d.promised[mc.key]
			}
			if alloc == nil && extra != nil {
				alloc = extra.promised[mc.key]
			}
			if alloc != nil {
				// Allocated already (or promised to another member sharing it): the member
				// must go where its devices are.
				b.whole = false
				if alloc.NodeSelector == nil {
					continue // devices reachable from every node (network-attached): as kube-scheduler reads it
				}
				ok, err := structured.NodeMatches(DRAFeatures, n.Node, "", false, alloc.NodeSelector)
				if err != nil {
					return b, false, fmt.Errorf("ResourceClaim %s: matching its allocation's node selector: %w", mc.key, err)
				}
				if !ok {
					return b, false, nil
				}
				continue
			}
			b.mine[i] = append(b.mine[i], mc.key)
			if _, ok := b.at[mc.key]; !ok {
				b.at[mc.key] = len(b.todo)
				b.todo = append(b.todo, mc.claim)
			}
		}
	}
	return b, true, nil
}

// allocateMany is allocateOn for several members at once, in one call of the allocator (one
// call per member was most of placing a gang): every member's claims are allocated on n, or
// none (nil). A claim several of them share is allocated once.
func (s *Snapshot) allocateMany(n *NodeState, ps []*corev1.Pod, extra *draExtra) (allocs []*draAlloc, full bool, err error) {
	d := s.dra
	b, ok, err := d.pending(n, ps, extra)
	if err != nil || !ok {
		return nil, false, err
	}
	todo, at, mine, whole := b.todo, b.at, b.mine, b.whole
	allocs = make([]*draAlloc, len(ps))
	if len(todo) == 0 {
		for i := range allocs {
			allocs[i] = &draAlloc{}
		}
		return allocs, false, nil
	}
	if len(d.byNode[n.Name()]) == 0 && len(d.anyNode) == 0 {
		return nil, whole, nil // no devices here at all
	}
	offered, classes := d.byNode[n.Name()], d.classes
	if plainCounts(todo) && !d.uncut[n.Name()] {
		var sel []bool
		if c := soleClass(todo); c != "" && len(d.anyNode) == 0 {
			if m, ok := d.selected(c, n.Name()); ok {
				sel, classes = m, d.withoutSelectors(c)
			}
		}
		offered = d.freeSlices(n.Name(), sel)
	}
	offered = append(offered[:len(offered):len(offered)], d.anyNode...)
	al, err := structured.NewAllocator(context.Background(), DRAFeatures, structured.AllocatedState{AllocatedDevices: d.allocated},
		classes, offered, d.cel)
	if err != nil {
		return nil, false, fmt.Errorf("building the device allocator: %w", err)
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if len(ps) > 1 {
		ctx, cancel = context.WithTimeout(ctx, batchTimeout)
	}
	defer cancel()
	results, err := al.Allocate(ctx, n.Node, todo)
	if len(ps) > 1 && errors.Is(err, context.DeadlineExceeded) {
		return nil, false, nil // the caller falls back to one member at a time
	}
	if errors.Is(err, structured.ErrFailedAllocationOnNode) {
		return nil, false, nil // this node's pools are unusable (invalid): other nodes may do
	}
	if err != nil {
		return nil, false, fmt.Errorf("allocating the claims of %s/%s: %w", ps[0].Namespace, ps[0].Name, err)
	}
	if results == nil {
		return nil, whole, nil
	}
	// Each claim's devices go to the first member that names it.
	given := map[string]bool{}
	for i := range ps {
		a := &draAlloc{claims: map[string]*resourceapi.AllocationResult{}}
		set := sets.New[structured.DeviceID]()
		for _, k := range mine[i] {
			r := &results[at[k]]
			a.claims[k] = r
			if !given[k] {
				given[k] = true
				addDevices(set, r)
			}
		}
		a.devices = set.UnsortedList()
		allocs[i] = a
		if extra == nil {
			d.commit(a)
		}
	}
	return allocs, false, nil
}

// plainCounts reports whether every request of claims is one exact count of devices without
// admin access: what the free-device estimate, offering only free devices and batching may
// assume. "All" requests need every matching device, taken ones included, to be refused
// rightly; admin access may use taken devices; alternatives (firstAvailable), several requests
// or constraints in a claim make a batch's joint search find fits one member at a time would not.
func plainCounts(claims []*resourceapi.ResourceClaim) bool {
	for _, c := range claims {
		if len(c.Spec.Devices.Requests) != 1 || len(c.Spec.Devices.Constraints) > 0 {
			return false
		}
		e := c.Spec.Devices.Requests[0].Exactly
		if e == nil || e.AllocationMode != resourceapi.DeviceAllocationModeExactCount || e.AdminAccess != nil && *e.AdminAccess {
			return false
		}
	}
	return true
}

// freeSlices are node's slices with the devices the ledger holds left out, and those sel
// marks false (by device, in d.ids' order; nil keeps all), where that changes nothing but the
// work: the allocator evaluates every class and request selector (CEL) on each device it
// considers, taken or not, and on a filling node most are taken. Slices whose devices consume
// shared counters are kept whole: the allocator reads a taken device's consumption from the
// slice. A slice left with no device is still offered: the allocator counts a pool's slices to
// tell it is whole.
func (d *draState) freeSlices(node string, sel []bool) []*resourceapi.ResourceSlice {
	in, ids := d.byNode[node], d.ids[node]
	out := make([]*resourceapi.ResourceSlice, 0, len(in)+len(d.anyNode))
	at := 0
	for _, sl := range in {
		first := at
		at += len(sl.Spec.Devices)
		drop := 0
		counters := len(sl.Spec.SharedCounters) > 0
		for i := range sl.Spec.Devices {
			counters = counters || len(sl.Spec.Devices[i].ConsumesCounters) > 0
			if sel != nil && !sel[first+i] || d.allocated.Has(ids[first+i]) {
				drop++
			}
		}
		if drop == 0 || counters {
			out = append(out, sl)
			continue
		}
		c := *sl
		c.Spec.Devices = make([]resourceapi.Device, 0, len(sl.Spec.Devices)-drop)
		for i, dev := range sl.Spec.Devices {
			if (sel == nil || sel[first+i]) && !d.allocated.Has(ids[first+i]) {
				c.Spec.Devices = append(c.Spec.Devices, dev)
			}
		}
		out = append(out, &c)
	}
	return out
}

// nodesWithDuplicateDevices are the nodes whose slices name a device (driver, pool, name) twice.
func nodesWithDuplicateDevices(ids map[string][]structured.DeviceID) map[string]bool {
	var out map[string]bool
	for node, list := range ids {
		seen := make(map[structured.DeviceID]bool, len(list))
		for _, id := range list {
			if seen[id] {
				if out == nil {
					out = map[string]bool{}
				}
				out[node] = true
				break
			}
			seen[id] = true
		}
	}
	return out
}

// batchTimeout bounds the allocator's search for a batch of members: a batch that does not fit
// can make it try device combinations for long (the allocator backtracks over them), and the
// caller then places the members one at a time, as kube-scheduler does.
const batchTimeout = 100 * time.Millisecond

// freeFor estimates how many more members needing need devices each fit in n's free devices:
// its own slices' devices the ledger does not hold, over need. -1 when it cannot tell (devices
// offered to many nodes, members whose requests are not plain counts).
func (d *draState) freeFor(n *NodeState, need int) int {
	if need <= 0 || len(d.anyNode) > 0 {
		return -1
	}
	free := 0
	for _, id := range d.ids[n.Name()] {
		if !d.allocated.Has(id) {
			free++
		}
	}
	return free / need
}

// devicesNeeded is how many devices p's own claims (made from templates: a named claim may be
// shared, so its devices are not each member's) that are still to be allocated ask for, when
// every request is a plain count; 0 when that cannot be told.
func (d *draState) devicesNeeded(p *corev1.Pod) int {
	claims, err := d.claimsOf(p)
	if err != nil {
		return 0
	}
	need := 0
	for _, mc := range claims {
		if mc.named || mc.claim.Status.Allocation != nil || d.promised[mc.key] != nil {
			continue
		}
		if !plainCounts([]*resourceapi.ResourceClaim{mc.claim}) {
			return 0
		}
		need += int(mc.claim.Spec.Devices.Requests[0].Exactly.Count)
	}
	return need
}

// commit records a member's allocation in the ledger.
func (d *draState) commit(a *draAlloc) {
	if a == nil {
		return
	}
	d.allocated.Insert(a.devices...)
	for k, v := range a.claims {
		d.promised[k] = v
	}
}

// commitFor records p's allocation a in the ledger as p's own, so that Without gives it back:
// a seat not bound yet that a snapshot counts where it will bind holds its devices as a bound
// one does. (Clones share podDevices: an entry a clone adds is p's in its original too, which
// only ever gives p's own devices back.)
func (d *draState) commitFor(p *corev1.Pod, a *draAlloc) {
	d.commit(a)
	if a != nil && len(a.devices) > 0 && p.UID != "" {
		d.podDevices[p.UID] = append(d.podDevices[p.UID], a.devices...)
	}
}

// draExtra is what an attempt has promised on top of the snapshot's ledger. Its devices go
// into the ledger itself while the attempt runs (the allocator reads one set; a union per
// allocation was most of placing a member) and come out when it ends (undo).
type draExtra struct {
	// log are the devices the attempt put in the ledger, in order.
	log []structured.DeviceID
	// on counts them per node.
	on       map[*NodeState]int
	promised map[string]*resourceapi.AllocationResult
}

// add puts a member's allocation on n into the ledger d for the rest of the attempt.
func (e *draExtra) add(d *draState, n *NodeState, a *draAlloc) {
	if e.promised == nil {
		e.promised = map[string]*resourceapi.AllocationResult{}
		e.on = map[*NodeState]int{}
	}
	d.allocated.Insert(a.devices...)
	e.log = append(e.log, a.devices...)
	e.on[n] += len(a.devices)
	for k, v := range a.claims {
		e.promised[k] = v
	}
}

// undo takes the attempt's devices after the first keep out of the ledger d again; it
// returns the state to restore with.
func (e *draExtra) undo(d *draState, keep int) {
	if d != nil {
		d.allocated.Delete(e.log[keep:]...)
	}
	e.log = e.log[:keep]
}

// untouched reports whether nothing the attempt promised can be why an allocation on n failed
// — it holds no device of n, and none of slices offered to every node — so the failure says n
// is full for members like these for the rest of the snapshot.
func (e *draExtra) untouched(d *draState, n *NodeState) bool {
	return e.on[n] == 0 && (len(d.anyNode) == 0 || len(e.log) == 0)
}

// draSaved is a draExtra as save keeps it: the devices themselves, not how many — the log may
// be cut back and refilled with other devices before a restore to it (placeOneByOne's seeds).
type draSaved struct {
	log      []structured.DeviceID
	on       map[*NodeState]int
	promised map[string]*resourceapi.AllocationResult
}

func (e *draExtra) save() draSaved {
	return draSaved{log: slices.Clone(e.log), on: maps.Clone(e.on), promised: maps.Clone(e.promised)}
}

// restore puts the attempt's promises back to st: the devices it holds now leave the ledger d,
// those it held then return.
func (e *draExtra) restore(d *draState, st draSaved) {
	e.undo(d, 0)
	if d != nil {
		d.allocated.Insert(st.log...)
	}
	e.log = slices.Clone(st.log)
	e.on, e.promised = maps.Clone(st.on), maps.Clone(st.promised)
}

// draBlocked says why a member's claims keep it from being placed anywhere (a claim or
// template that does not exist, an invalid claim), or "" when they do not. Without the
// cluster's dynamic resources (SetDynamicResources) every member with claims is blocked.
func (s *Snapshot) draBlocked(p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) == 0 {
		return ""
	}
	if s.dra == nil {
		return ""
	}
	if _, err := s.dra.claimsOf(p); err != nil {
		return err.Error()
	}
	return ""
}

// DevicesTaken is how many devices the snapshot's ledger counts taken (allocated, or promised
// by berth), for tests and for status.
func (s *Snapshot) DevicesTaken() int {
	if s.dra == nil {
		return 0
	}
	return s.dra.allocated.Len()
}
