// Command gen-instance-types writes the rig's Karpenter-kwok instance-types file from berth's
// GPU catalogue (internal/gpu). Run by `make generate`.
package main

import (
	"fmt"
	"os"

	"github.com/berth-dev/berth/internal/gpu"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen-instance-types OUTPUT.json")
		os.Exit(2)
	}
	data, err := gpu.KwokInstanceTypesJSON()
	if err == nil {
		err = os.WriteFile(os.Args[1], data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-instance-types:", err)
		os.Exit(1)
	}
}
