// Command kubectl-berth is berth's kubectl plugin: berth's client commands (why, doctor,
// nodepools render, version) with kubectl's connection flags, in a pure-Go binary for Linux,
// macOS and Windows. kubectl runs it as `kubectl berth ...`.
package main

import (
	"os"

	"github.com/berth-dev/berth/internal/cli/kubecmd"
)

func main() { os.Exit(kubecmd.ExecutePlugin(os.Args[1:])) }
