// Package v1alpha1 holds the scheduling.berth.dev/v1alpha1 API: the PodGroup that makes a set of
// pods a gang, admitted whole or not at all.
//
// This package holds types only: no clients, no controllers.
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.berth.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "scheduling.berth.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
