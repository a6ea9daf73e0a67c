// Package config holds berth's kustomize configuration (CRDs, RBAC, samples) and embeds the
// generated CRDs so the berth binary can install them (`berth dev up`).
package config

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

//go:embed crd/bases/*.yaml
var crds embed.FS

// CRDs returns berth's CustomResourceDefinitions as one multi-document YAML stream.
func CRDs() ([]byte, error) {
	files, err := fs.Glob(crds, "crd/bases/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing embedded CRDs: %w", err)
	}
	sort.Strings(files)
	var out [][]byte
	for _, f := range files {
		data, err := crds.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading embedded CRD %s: %w", f, err)
		}
		out = append(out, data)
	}
	return bytes.Join(out, []byte("\n---\n")), nil
}
