// Package v1alpha1 holds the scheduling.berth.dev/v1alpha1 API: the PodGroup that makes a set of
// pods a gang, admitted whole or not at all.
//
// This package holds types only: no clients, no controllers.
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.berth.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "scheduling.berth.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the PodGroup kinds under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PodGroup{}, &PodGroupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
