//go:build tools

// Package release pins what `make release-dry-run` (hack/release-dry-run.sh) runs the release
// with, offline: cosign (signing and verifying with a local key pair where the release signs
// keylessly), crane (a local registry and pushes) and the helm CLI (package and push the
// chart). Its own module, so it never moves the rig's other tools.
package release

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
	_ "helm.sh/helm/v3/cmd/helm"
)
