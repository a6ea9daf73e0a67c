package simulate

import (
	"strings"
	"testing"
)

func TestPickPolicies(t *testing.T) {
	berth, duty := &Berth{label: BerthName}, &DutyCycle{}
	all, err := pickPolicies(nil, berth, duty)
	if err != nil || len(all) != 2 {
		t.Errorf("no names: %v, %v; want both", all, err)
	}
	one, err := pickPolicies([]string{"hpa-duty-cycle"}, berth, duty)
	if err != nil || len(one) != 1 || one[0] != Autoscaler(duty) {
		t.Errorf("one name: %v, %v", one, err)
	}
	if _, err := pickPolicies([]string{"berth", "keda"}, berth, duty); err == nil || !strings.Contains(err.Error(), "unknown policies keda") || !strings.Contains(err.Error(), "kubeai-concurrency") {
		t.Errorf("an unknown name: %v, want an error naming it and the known ones", err)
	}
}
