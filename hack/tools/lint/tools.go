//go:build tools

// Package lint pins golangci-lint, which `make verify` runs over berth (config: .golangci.yml
// at the repository root), built from the Go module proxy by hack/build-tools.sh. Its own
// module, so the linters' dependencies never move berth's or the rig's versions.
package lint

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
