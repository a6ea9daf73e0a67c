package kubecmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionWithoutACluster: --client, and a machine with no cluster configured, print the
// client's version and succeed; a kubeconfig whose server cannot be reached prints the client's
// version and fails, as kubectl version does.
func TestVersionWithoutACluster(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, args := range [][]string{{"--client"}, {}} {
		var out bytes.Buffer
		cmd := Version()
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil || !strings.HasPrefix(out.String(), "client: berth ") {
			t.Errorf("version %v: %q, %v", args, out.String(), err)
		}
	}
	kubeconfig := filepath.Join(home, "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := Version()
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--request-timeout", "2s"})
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.HasPrefix(out.String(), "client: berth ") || !strings.Contains(err.Error(), "server's version") {
		t.Errorf("version against an unreachable server: %q, %v; want the client's version and an error", out.String(), err)
	}
}
