package kubecmd

import "testing"

func TestObjectName(t *testing.T) {
	for in, want := range map[string]string{
		"Deployment sick/llama": "deployment/llama",
		"NodePool gpu-h100":     "nodepool/gpu-h100",
		"odd":                   "odd",
	} {
		if got := objectName(in); got != want {
			t.Errorf("objectName(%q) = %q, want %q", in, got, want)
		}
	}
}
