package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/karpenter-provider-aws/pkg/providers/nvidiadra"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// The rig's DRA mode: GPUs published as ResourceSlices of NVIDIA's driver, gpu.nvidia.com, for
// the kwok nodes Karpenter launches (StartDRADriver), and Karpenter sizing pods' resource claims
// against the same devices (KarpenterOptions.DRA: karpenter-kwok-dra, --ignore-dra-requests=false).

// DRADriver is the DRA driver the rig's GPU devices belong to: NVIDIA's.
const DRADriver = nvidiadra.DriverName

// The versions every rig GPU reports for the attributes NVIDIA's driver reads from the node at
// run time (Karpenter's templates leave them to be bound; a published slice has values).
var (
	draDriverVersion     = "580.95.5"
	draCUDADriverVersion = "13.0.0"
)

// GPUDevices are the devices a node of each GPU instance type of the instance-types file
// publishes under the rig's DRA mode, keyed by instance type: those Karpenter's AWS provider
// declares for the EC2 type of that name (pkg/providers/nvidiadra), with the run-time
// attributes given values.
func GPUDevices(ctx context.Context, instanceTypesFile string) (map[string][]resourcev1.Device, error) {
	raw, err := os.ReadFile(instanceTypesFile)
	if err != nil {
		return nil, fmt.Errorf("rig: reading instance types: %w", err)
	}
	var types []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &types); err != nil {
		return nil, fmt.Errorf("rig: reading instance types %s: %w", instanceTypesFile, err)
	}
	its := make([]*cloudprovider.InstanceType, len(types))
	for i, t := range types {
		its[i] = &cloudprovider.InstanceType{Name: t.Name}
	}
	out := map[string][]resourcev1.Device{}
	for name, dr := range nvidiadra.NewDefaultProvider().ResolveDynamicResources(ctx, its, nil) {
		for _, tmpl := range dr.ResourceSliceTemplates {
			if tmpl.Driver.Value() != DRADriver {
				continue
			}
			for _, d := range tmpl.Devices {
				dev := resourcev1.Device{Name: d.Name.Value(), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{},
					Capacity: d.Capacity, ConsumesCounters: d.ConsumesCounters}
				if d.AllowMultipleAllocations {
					dev.AllowMultipleAllocations = ptr.To(true)
				}
				for k, v := range d.Attributes {
					dev.Attributes[k] = v
				}
				dev.Attributes[nvidiadra.AttributeDriverVersion] = resourcev1.DeviceAttribute{VersionValue: ptr.To(draDriverVersion)}
				dev.Attributes[nvidiadra.AttributeCUDADriverVersion] = resourcev1.DeviceAttribute{VersionValue: ptr.To(draCUDADriverVersion)}
				out[name] = append(out[name], dev)
			}
		}
	}
	for name := range out {
		slices.SortFunc(out[name], func(a, b resourcev1.Device) int { return compareDeviceNames(a.Name, b.Name) })
	}
	return out, nil
}

// compareDeviceNames orders gpu-2 before gpu-10.
func compareDeviceNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// GPUDeviceClass is the DeviceClass of the rig's GPUs: every device of NVIDIA's driver (the
// class NVIDIA's driver installs under the same name).
func GPUDeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DRADriver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{
			{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DRADriver)}},
		}},
	}
}

// StartDRADriver creates the GPU DeviceClass and runs the rig's DRA driver: every kwok node of a
// GPU instance type gets one ResourceSlice of NVIDIA's driver with its devices (GPUDevices),
// its pool named after the node and the Node as its owner (the slice goes with the node), as
// NVIDIA's kubelet plugin publishes them once a node is up. Karpenter's own kwok DRA driver
// (dra-kwok-driver in its module) cannot list its configuration with the client it is built
// with (its scheme has no list options for its group), so the rig publishes the slices itself;
// what it publishes is what Karpenter's templates said the node would have.
func (r *Rig) StartDRADriver(ctx context.Context, instanceTypesFile string) error {
	devices, err := GPUDevices(ctx, instanceTypesFile)
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, GPUDeviceClass()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rig: creating the GPU DeviceClass: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.loops = append(r.loops, func() { cancel(); <-done })
	r.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		published := map[string]bool{}
		for {
			if err := r.publishGPUSlices(loopCtx, devices, published); err != nil && loopCtx.Err() == nil {
				r.opts.Logf("rig: DRA driver: %v", err)
			}
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	r.opts.Logf("rig: DRA driver publishing %s devices for kwok GPU nodes", DRADriver)
	return nil
}

// publishGPUSlices creates the slice of every kwok GPU node that has none yet (published holds
// the nodes done).
func (r *Rig) publishGPUSlices(ctx context.Context, devices map[string][]resourcev1.Device, published map[string]bool) error {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var errs []error
	for i := range nodes.Items {
		n := &nodes.Items[i]
		devs, ok := devices[n.Labels[corev1.LabelInstanceTypeStable]]
		if !ok || published[n.Name] || n.Annotations[berthv1alpha1.KwokNodeAnnotation] == "" || !n.DeletionTimestamp.IsZero() {
			continue
		}
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:            strings.ReplaceAll(DRADriver, ".", "-") + "-" + n.Name,
				Labels:          map[string]string{berthv1alpha1.DevDRASliceLabel: "true"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   DRADriver,
				Pool:     resourcev1.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1},
				NodeName: ptr.To(n.Name),
				Devices:  devs,
			},
		}
		switch err := r.Client.Create(ctx, slice); {
		case err == nil, apierrors.IsAlreadyExists(err):
			published[n.Name] = true
		default:
			errs = append(errs, fmt.Errorf("publishing the devices of node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}
