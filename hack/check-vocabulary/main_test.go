package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckFindsKeysOutsideTheVocabulary(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("api/v1alpha1/wellknown.go", "package v1alpha1\n\nconst L = \"scheduling.berth.dev/pod-group\"\n")
	write("controllers/x/x.go", "package x\n\nimport _ \"k8s.io/api/core/v1\"\n\nconst (\n\tA = \"scheduling.berth.dev/seat-of\"\n\tB = \"reserve.scheduling.berth.dev/\"\n\tCIDR = \"127.1.0.0/16\"\n\tV = \"v1\"\n)\n\ntype T struct {\n\tF string `json:\"f\"`\n}\n")
	write("controllers/x/x_test.go", "package x\n\nconst T = \"karpenter.sh/do-not-disrupt\"\n")
	write("test/helpers/h.go", "package helpers\n\nconst H = \"karpenter.sh/nodepool\"\n")
	got, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(root, "controllers/x/x.go") + ":6:6: scheduling.berth.dev/seat-of",
		filepath.Join(root, "controllers/x/x.go") + ":7:6: reserve.scheduling.berth.dev/",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
}

func TestRepositoryHasOneVocabulary(t *testing.T) {
	got, err := check("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Errorf("keys spelled outside api/v1alpha1:\n%v", got)
	}
}
