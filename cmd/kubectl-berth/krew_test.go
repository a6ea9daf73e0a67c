package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/berth-dev/berth/internal/cli/kubecmd"
)

// TestKrewManifest: the Krew manifest names the plugin's binary and its licence on every platform
// the release workflow builds, each with placeholders the workflow fills (a platform in one and
// not the other would ship a broken install), and the archives carry the licence.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile("../../hack/krew/berth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatal(err)
	}
	workflow, err := os.ReadFile("../../.github/workflows/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range m.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		target := os + "/" + arch
		got = append(got, target)
		wantBin := "kubectl-berth"
		if os == "windows" {
			wantBin += ".exe"
		}
		if p.Bin != wantBin || p.SHA256 != "SHA256_"+os+"_"+arch || !strings.HasSuffix(p.URI, "kubectl-berth_VERSION_"+os+"_"+arch+".tar.gz") {
			t.Errorf("%s: %+v", target, p)
		}
		// Krew installs only the files a platform names: the binary and the licence the archive
		// carries (Krew's review asks for it).
		var files []string
		for _, f := range p.Files {
			files = append(files, f.From)
		}
		if !slices.Contains(files, wantBin) || !slices.Contains(files, "LICENSE") {
			t.Errorf("%s: files %v, want the binary and LICENSE", target, files)
		}
		if !strings.Contains(string(workflow), target) {
			t.Errorf("the release workflow does not build %s", target)
		}
	}
	if !strings.Contains(string(workflow), `cp LICENSE "$dir/"`) {
		t.Error("the release workflow does not put LICENSE in the plugin's archives")
	}
	if m.Kind != "Plugin" || m.Metadata.Name != "berth" || m.Spec.Version != "VERSION" || !slices.Contains(got, "windows/amd64") || !slices.Contains(got, "darwin/arm64") {
		t.Errorf("manifest %+v", m)
	}
}

// TestPluginCommands: the plugin offers the client commands and nothing that needs a node.
func TestPluginCommands(t *testing.T) {
	var names []string
	for _, c := range kubecmd.Plugin().Commands() {
		names = append(names, c.Name())
	}
	slices.Sort(names)
	if want := []string{"doctor", "nodepools", "version", "why"}; !slices.Equal(names, want) {
		t.Errorf("plugin commands %v, want %v", names, want)
	}
}
