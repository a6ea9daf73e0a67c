package doctor

import "k8s.io/apimachinery/pkg/runtime"

// runtimeConvert decodes an unstructured map into a typed object.
func runtimeConvert(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
