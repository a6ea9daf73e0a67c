// Command berth is GPU capacity on Kubernetes that arrives whole and stays put: gang admission
// for PodGroups, Karpenter integration, a KEDA external scaler for vLLM and a node GPU agent,
// in one binary. See `berth --help`.
package main

import (
	"os"

	"github.com/berth-dev/berth/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:]))
}
