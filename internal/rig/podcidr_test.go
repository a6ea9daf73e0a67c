package rig

import "testing"

func TestPodRangesAreExclusive(t *testing.T) {
	a, err := allocatePodRange()
	if err != nil {
		t.Fatal(err)
	}
	b, err := allocatePodRange()
	if err != nil {
		t.Fatal(err)
	}
	if a.cidr == b.cidr {
		t.Fatalf("two rigs got the same pod range %s", a.cidr)
	}
	b.release()
	c, err := allocatePodRange()
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	defer a.release()
	if c.cidr == a.cidr {
		t.Errorf("range %s handed out again while held", a.cidr)
	}
}
