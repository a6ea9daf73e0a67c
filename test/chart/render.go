// Package chart renders berth's Helm chart (charts/berth) with Helm's own template engine and
// schema validation, for the chart tests here and the server-side dry-run on the rig
// (test/integration/chart).
package chart

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// Dir is the chart's folder.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "charts", "berth")
}

// Release is the release the tests render: helm install berth -n berth-system.
var Release = chartutil.ReleaseOptions{Name: "berth", Namespace: "berth-system", IsInstall: true}

// Render renders the chart with values (merged over values.yaml, validated against
// values.schema.json as helm install does) and returns every object keyed "Kind/name".
func Render(values map[string]any) (map[string]map[string]any, error) {
	objs, err := RenderList(values)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]any{}
	for _, obj := range objs {
		meta, _ := obj["metadata"].(map[string]any)
		out[fmt.Sprintf("%v/%v", obj["kind"], meta["name"])] = obj
	}
	return out, nil
}

// RenderList is Render as a list, in template-file order (the CRD template, crds.yaml, first); hooks
// and NOTES.txt are left out, as helm install leaves them out of the release's objects.
func RenderList(values map[string]any) ([]map[string]any, error) {
	return renderObjects(values, false)
}

// renderFiles renders every template with values merged over values.yaml and validated against
// values.schema.json, as helm install does.
func renderFiles(values map[string]any) (map[string]string, *chart.Chart, error) {
	ch, err := loader.Load(Dir())
	if err != nil {
		return nil, nil, fmt.Errorf("loading chart: %w", err)
	}
	merged, err := mergedValues(ch.Values, values)
	if err != nil {
		return nil, nil, err
	}
	if err := chartutil.ValidateAgainstSchema(ch, merged); err != nil {
		return nil, nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, Release, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, nil, err
	}
	return files, ch, nil
}

// renderObjects renders the release's objects (hooks false, CRDs first) or its hooks.
func renderObjects(values map[string]any, hooks bool) ([]map[string]any, error) {
	files, ch, err := renderFiles(values)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	if !hooks {
		for _, crd := range ch.CRDObjects() {
			docs, err := parse(crd.Filename, string(crd.File.Data))
			if err != nil {
				return nil, err
			}
			out = append(out, docs...)
		}
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasSuffix(n, "NOTES.txt") {
			continue // printed after install, not applied
		}
		docs, err := parse(n, files[n])
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if isHook(d) != hooks {
				continue
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// isHook reports whether obj is a Helm hook (helm test's pods): run by Helm at its hook, not
// installed with the release.
func isHook(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	_, ok := ann["helm.sh/hook"]
	return ok
}

// Hooks renders the chart's hooks (helm test's objects) with values.
func Hooks(values map[string]any) ([]map[string]any, error) {
	return renderObjects(values, true)
}

// Notes renders NOTES.txt, what helm install prints, with values.
func Notes(values map[string]any) (string, error) {
	files, _, err := renderFiles(values)
	if err != nil {
		return "", err
	}
	for n, text := range files {
		if strings.HasSuffix(n, "NOTES.txt") {
			return text, nil
		}
	}
	return "", fmt.Errorf("the chart has no NOTES.txt")
}

func parse(name, text string) ([]map[string]any, error) {
	var out []map[string]any
	for _, doc := range SplitDocs(text) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s: parsing rendered YAML: %w\n%s", name, err, doc)
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	return out, nil
}

// mergedValues is values.yaml with values over it, as helm install sees them.
func mergedValues(defaults, values map[string]any) (map[string]any, error) {
	a, err := copyValues(values)
	if err != nil {
		return nil, err
	}
	b, err := copyValues(defaults)
	if err != nil {
		return nil, err
	}
	return chartutil.CoalesceTables(a, b), nil
}

func copyValues(v map[string]any) (map[string]any, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, yaml.Unmarshal(data, &out)
}

// SplitDocs splits a YAML stream into its non-empty documents.
func SplitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split(s, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(d), "---")) != "" {
			out = append(out, d)
		}
	}
	return out
}
