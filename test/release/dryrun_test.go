package release_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/test/testenv"
)

// TestReleaseDryRun runs `make release-dry-run`'s script: both images with their SBOMs pushed
// to a loopback registry, signed and attested, the chart packaged by the release's own step with
// both digests pinned, pushed and signed; it fails unless every signature and attestation
// verifies offline, none verifies against a key that never signed, and the chart pulled back
// runs both images by digest. Here the summary it prints is checked too.
func TestReleaseDryRun(t *testing.T) {
	if os.Getenv("BERTH_TOOLS_DIR") == "" {
		testenv.SkipOrFail(t, "BERTH_TOOLS_DIR is not set: the dry run needs cosign, crane and helm from hack/build-tools.sh (make test sets it)")
	}
	if testing.Short() {
		t.Skip("builds both images: not in -short")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../hack/release-dry-run.sh", out)
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-dryruntest")
	// On a timeout the whole process group goes (go run, crane, cosign), not only the shell
	// whose children would hold the output open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release dry run: %v\n%s", err, got)
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(summary)
	for _, a := range []string{"berth@sha256:", "berth-agent@sha256:", "charts/berth@sha256:"} {
		if !strings.Contains(s, a) {
			t.Errorf("the summary names no signed %s…:\n%s", a, s)
		}
	}
	for _, m := range regexp.MustCompile(`SBOM: (\d+) packages`).FindAllStringSubmatch(s, -1) {
		if n, _ := strconv.Atoi(m[1]); n < 10 {
			t.Errorf("an SBOM lists %d packages; berth is built from hundreds of modules:\n%s", n, s)
		}
	}
	if strings.Count(s, "attested, verified") != 2 {
		t.Errorf("want both SBOMs attested and verified:\n%s", s)
	}
}
