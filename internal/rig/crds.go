package rig

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the field manager of everything the rig applies.
const FieldOwner = client.FieldOwner("berth-rig")

// InstallCRDsFromDir applies every CustomResourceDefinition in the *.yaml files of dir and waits
// until each is established.
func (r *Rig) InstallCRDsFromDir(ctx context.Context, dir string) error {
	objs, err := readManifestDir(dir)
	if err != nil {
		return err
	}
	return r.installCRDObjects(ctx, objs)
}

// readManifestDir decodes the objects of the *.yaml files of dir, in file-name order.
func readManifestDir(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("rig: listing CRDs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("rig: no CRD files in %s (run hack/build-tools.sh)", dir)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rig: reading %s: %w", f, err)
		}
		objs, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("rig: %s: %w", f, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// InstallCRDs applies the CustomResourceDefinitions in a multi-document YAML stream and waits
// until each is established.
func (r *Rig) InstallCRDs(ctx context.Context, manifests []byte) error {
	objs, err := DecodeManifests(manifests)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	return r.installCRDObjects(ctx, objs)
}

// installCRDObjects applies the CustomResourceDefinitions among objs and waits until each is
// established.
func (r *Rig) installCRDObjects(ctx context.Context, objs []*unstructured.Unstructured) error {
	var names []string
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := r.Apply(ctx, o); err != nil {
			return err
		}
		names = append(names, o.GetName())
	}
	for _, name := range names {
		if err := r.waitEstablished(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// Apply server-side-applies an object as the rig's field owner, forcing ownership.
func (r *Rig) Apply(ctx context.Context, obj *unstructured.Unstructured) error {
	obj = obj.DeepCopy()
	obj.SetResourceVersion("")
	obj.SetManagedFields(nil)
	if err := r.Client.Patch(ctx, obj, client.Apply, FieldOwner, client.ForceOwnership); err != nil { //nolint:staticcheck // client.Apply with unstructured is the simplest SSA here
		return fmt.Errorf("rig: applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

func (r *Rig) waitEstablished(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("rig: CRD %s not established: %w", name, err)
	}
	// The discovery cache of a client built before the CRD existed does not know the new kinds.
	if m, ok := r.Client.RESTMapper().(interface{ Reset() }); ok {
		m.Reset()
	}
	return nil
}

// DecodeManifests splits a multi-document YAML stream into objects, skipping empty documents.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading YAML stream: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj unstructured.Unstructured
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("decoding YAML document: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		out = append(out, &obj)
	}
}

// BerthNamespace is the namespace berth runs in on the rig (its webhook Secret, its seat pods),
// as the Helm chart's release namespace is in a cluster.
const BerthNamespace = "berth-system"

// ensureDefaultNamespace creates the namespaces a cluster starts with, and BerthNamespace.
func (r *Rig) ensureDefaultNamespace(ctx context.Context) error {
	for _, name := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, BerthNamespace} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	return nil
}
