package chart_test

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/test/chart"
)

// image is the image of obj's first container.
func image(t *testing.T, objs map[string]map[string]any, key string) string {
	t.Helper()
	cs, _ := dig(objs[key], "spec", "template", "spec", "containers").([]any)
	if len(cs) == 0 {
		t.Fatalf("%s has no containers", key)
	}
	img, _ := cs[0].(map[string]any)["image"].(string)
	return img
}

// TestImageReferences: berth's components run the static berth image and the agent its cgo
// image, by the chart's appVersion unless a tag is given, and by digest when one is given.
func TestImageReferences(t *testing.T) {
	const (
		d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	tests := []struct {
		name              string
		values            map[string]any
		berth, berthAgent string
	}{
		{"defaults: the tag the release workflow pushes (v<version>)", nil, "ghcr.io/berth-dev/berth:v0.1.0", "ghcr.io/berth-dev/berth-agent:v0.1.0"},
		{"tags", map[string]any{
			"image": map[string]any{"tag": "v0.2.0"},
			"agent": map[string]any{"image": map[string]any{"tag": "v0.2.1"}},
		}, "ghcr.io/berth-dev/berth:v0.2.0", "ghcr.io/berth-dev/berth-agent:v0.2.1"},
		{"digests win over tags", map[string]any{
			"image": map[string]any{"repository": "registry.example.com/berth", "tag": "v0.2.0", "digest": d1},
			"agent": map[string]any{"image": map[string]any{"repository": "registry.example.com/berth-agent", "digest": d2}},
		}, "registry.example.com/berth@" + d1, "registry.example.com/berth-agent@" + d2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := mustRender(t, tt.values)
			for _, key := range []string{"Deployment/berth-controller", "Deployment/berth-scaler"} {
				if got := image(t, objs, key); got != tt.berth {
					t.Errorf("%s runs %q, want %q", key, got, tt.berth)
				}
			}
			if got := image(t, objs, "DaemonSet/berth-agent"); got != tt.berthAgent {
				t.Errorf("the agent runs %q, want %q", got, tt.berthAgent)
			}
		})
	}
	for _, bad := range []string{"latest", "sha256:abc", "sha512:" + strings.Repeat("1", 64)} {
		if _, err := chart.Render(map[string]any{"image": map[string]any{"digest": bad}}); err == nil || !strings.Contains(err.Error(), "digest") {
			t.Errorf("digest %q: error = %v, want one naming digest", bad, err)
		}
		if _, err := chart.Render(map[string]any{"agent": map[string]any{"image": map[string]any{"digest": bad}}}); err == nil || !strings.Contains(err.Error(), "digest") {
			t.Errorf("agent digest %q: error = %v, want one naming digest", bad, err)
		}
	}
}
