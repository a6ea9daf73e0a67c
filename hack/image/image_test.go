package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImages builds both archives as `make image` does, loads each back with
// go-containerregistry, and checks what a node would run: the entrypoint is berth, the
// binary taken from the image's layers runs `version --client` and reports the stamped version,
// berth is static, and every library the agent links is in the agent's image.
func TestImages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the images are linux images; berth-agent's cgo build needs a linux machine")
	}
	out := t.TempDir()
	opt := Options{Root: "../..", Arch: runtime.GOARCH, Version: "v0.0.0-imagetest", Commit: "abc1234", Work: t.TempDir(), Log: testWriter{t}}
	for _, spec := range Specs {
		t.Run(spec.Name, func(t *testing.T) {
			path, digest, err := Write(spec, opt, "ghcr.io/berth-dev", out)
			if err != nil {
				t.Fatal(err)
			}
			tag, err := name.NewTag("ghcr.io/berth-dev/" + spec.Name + ":v0.0.0-imagetest")
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("loading %s: %v", path, err)
			}
			if got, err := img.Digest(); err != nil || got.String() != digest {
				t.Errorf("digest of the loaded image = %v (%v), printed %s", got, err, digest)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/berth"}) || !slices.Equal(cf.Config.Cmd, spec.Cmd) {
				t.Errorf("entrypoint %q cmd %q, want [/berth] %q", cf.Config.Entrypoint, cf.Config.Cmd, spec.Cmd)
			}
			if cf.Config.User != NonRoot || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
				t.Errorf("user %q platform %s/%s", cf.Config.User, cf.OS, cf.Architecture)
			}
			if cf.Config.Labels["org.opencontainers.image.version"] != "v0.0.0-imagetest" {
				t.Errorf("labels %v", cf.Config.Labels)
			}

			files := filesOf(t, img)
			bin := filepath.Join(t.TempDir(), "berth")
			if err := os.WriteFile(bin, files["berth"], 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(bin, "version", "--client").CombinedOutput()
			if err != nil || !strings.Contains(string(got), "berth v0.0.0-imagetest (commit abc1234") {
				t.Fatalf("berth version from the image: %q (%v)", got, err)
			}
			if _, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok {
				t.Error("no CA bundle in the image")
			}

			// The SBOM names what the image ships: the Go toolchain, berth at its version, the
			// modules it was built from (client-go among them), and the agent's libc.
			purls := sbomPURLs(t, spec, img)
			wantPURLs := []string{"pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go"), "pkg:golang/github.com/berth-dev/berth@v0.0.0-imagetest"}
			if spec.CGO {
				v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "libc6").Output()
				if err != nil {
					t.Fatal(err)
				}
				distro, err := HostDistro()
				if err != nil {
					t.Fatal(err)
				}
				wantPURLs = append(wantPURLs, "pkg:deb/"+distro.ID+"/libc6@"+purlVersion(string(v))+"?arch=")
			}
			for _, w := range wantPURLs {
				if !slices.ContainsFunc(purls, func(p string) bool { return strings.HasPrefix(p, w) }) {
					t.Errorf("the SBOM has no package %s", w)
				}
			}
			if !slices.ContainsFunc(purls, func(p string) bool { return strings.HasPrefix(p, "pkg:golang/k8s.io/client-go@v0.") }) {
				t.Errorf("the SBOM lists no client-go among its %d packages", len(purls))
			}

			f, err := elf.NewFile(bytes.NewReader(files["berth"]))
			if err != nil {
				t.Fatal(err)
			}
			interp, err := Interpreter(f)
			if err != nil {
				t.Fatal(err)
			}
			if !spec.CGO {
				if interp != "" {
					t.Errorf("berth asks for the ELF interpreter %s; want a static binary", interp)
				}
				return
			}
			// Every library the agent needs resolves inside the image, as the dynamic loader
			// there would find it (its default paths), not only on this machine.
			if _, ok := files[strings.TrimPrefix(interp, "/")]; interp == "" || !ok {
				t.Fatalf("interpreter %q not in the image", interp)
			}
			needed, err := f.ImportedLibraries()
			if err != nil {
				t.Fatal(err)
			}
			if len(needed) == 0 {
				t.Fatal("the agent links no shared library; the cgo build did not happen")
			}
			for _, lib := range needed {
				if !inLoaderPath(files, lib) {
					t.Errorf("%s, needed by the agent, is not in the image", lib)
				}
			}
			// Scanners see the C library it ships: a dpkg record of the package that owns it,
			// with this machine's version.
			want, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "libc6").Output()
			if err != nil {
				t.Fatal(err)
			}
			status := string(files["var/lib/dpkg/status.d/libc6"])
			if !strings.Contains(status, "Package: libc6\n") || !strings.Contains(status, "Version: "+string(want)+"\n") {
				t.Errorf("no dpkg record of libc6 %s in the image: %q", want, status)
			}
			if _, ok := files["usr/share/doc/libc6/copyright"]; !ok {
				t.Error("libc6's copyright is not in the image")
			}
		})
	}
}

// sbomPURLs are the package URLs of img's SBOM, checked to be an SPDX 2.3 document whose image
// package contains every other package.
func sbomPURLs(t *testing.T, spec Spec, img v1.Image) []string {
	t.Helper()
	distro, err := HostDistro()
	if err != nil {
		t.Fatal(err)
	}
	data, err := SBOM("ghcr.io/berth-dev/"+spec.Name, "v0.0.0-imagetest", img, time.Unix(0, 0), distro)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the SBOM is no JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 2 || len(doc.Relationships) != len(doc.Packages) {
		t.Fatalf("SBOM: version %s, %d packages, %d relationships", doc.SPDXVersion, len(doc.Packages), len(doc.Relationships))
	}
	var purls []string
	for _, p := range doc.Packages[1:] {
		if len(p.ExternalRefs) != 1 || p.VersionInfo == "" {
			t.Errorf("SBOM package %s: version %q, refs %v", p.Name, p.VersionInfo, p.ExternalRefs)
			continue
		}
		purls = append(purls, p.ExternalRefs[0].Locator)
	}
	return purls
}

// inLoaderPath reports whether lib is in one of the folders glibc's loader searches.
func inLoaderPath(files map[string][]byte, lib string) bool {
	for _, dir := range []string{"lib", "lib64", "usr/lib", "usr/lib64", "lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"} {
		if _, ok := files[dir+"/"+lib]; ok {
			return true
		}
	}
	return false
}

// filesOf flattens img's layers into path → contents.
func filesOf(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
