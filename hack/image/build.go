package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Binary is where each image keeps berth, and its entrypoint.
const Binary = "/berth"

// NonRoot is the user every image runs as unless the pod says otherwise (the chart's
// restricted security context uses the same).
const NonRoot = "65532:65532"

// caBundle is Debian's system trust store, copied into both images so berth can reach
// HTTPS endpoints outside the cluster (a Prometheus source, a registry) with public roots.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// Spec says what one image holds.
type Spec struct {
	// Name is the image's name: berth or berth-agent.
	Name string
	// CGO builds the binary with cgo (the agent's NVML binding) and adds the C libraries it
	// needs, resolved on the build machine, as the image's base layer.
	CGO bool
	// Cmd is the image's default arguments after the entrypoint.
	Cmd []string
}

// Specs are the images berth ships: berth (static; controller, scaler, doctor, nodepools…)
// and berth-agent (cgo; the node GPU agent, which loads NVML that the NVIDIA container
// toolkit mounts into the container at run time).
var Specs = []Spec{
	{Name: "berth", Cmd: []string{"--help"}},
	{Name: "berth-agent", CGO: true, Cmd: []string{"agent"}},
}

// Options are one build's inputs.
type Options struct {
	// Root is the repository root (the main module).
	Root string
	// Arch is the target architecture (linux only). berth-agent builds only for the build
	// machine's own architecture: cross-compiling cgo needs a C cross toolchain.
	Arch string
	// Version and Commit are stamped into the binary and the image's labels.
	Version, Commit string
	// Created is the image's creation time; the zero time keeps images reproducible.
	Created time.Time
	// Work is a scratch folder for the binaries.
	Work string
	// Log receives progress lines.
	Log io.Writer
}

// Build builds spec's binary and its image.
func Build(spec Spec, opt Options) (v1.Image, error) {
	bin := filepath.Join(opt.Work, spec.Name)
	if err := goBuild(spec, opt, bin); err != nil {
		return nil, err
	}
	var layers []v1.Layer
	base, err := baseLayer(spec, bin)
	if err != nil {
		return nil, fmt.Errorf("%s: base layer: %w", spec.Name, err)
	}
	layers = append(layers, base)
	app, err := appLayer(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: binary layer: %w", spec.Name, err)
	}
	layers = append(layers, app)

	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("%s: adding layers: %w", spec.Name, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s: reading config: %w", spec.Name, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", opt.Arch
	cf.Created = v1.Time{Time: opt.Created}
	cf.Config.Entrypoint = []string{Binary}
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = NonRoot
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    spec.Name,
		"org.opencontainers.image.source":   "https://github.com/berth-dev/berth",
		"org.opencontainers.image.version":  opt.Version,
		"org.opencontainers.image.revision": opt.Commit,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("%s: setting config: %w", spec.Name, err)
	}
	return img, nil
}

// goBuild builds berth for the image: trimmed paths, version stamped, static unless cgo.
func goBuild(spec Spec, opt Options, out string) error {
	ldflags := fmt.Sprintf("-s -w -X github.com/berth-dev/berth/internal/version.Version=%s -X github.com/berth-dev/berth/internal/version.Commit=%s", opt.Version, opt.Commit)
	cgo := "0"
	if spec.CGO {
		cgo = "1"
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/berth")
	cmd.Dir = opt.Root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+opt.Arch, "CGO_ENABLED="+cgo)
	if spec.CGO {
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	cmd.Stdout, cmd.Stderr = opt.Log, opt.Log
	fmt.Fprintf(opt.Log, "building %s (linux/%s, CGO_ENABLED=%s)\n", spec.Name, opt.Arch, cgo)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: go build: %w", spec.Name, err)
	}
	return nil
}

// file is one entry of a layer.
type file struct {
	path string
	mode int64
	data []byte
}

// baseLayer holds what the binary needs around it: the nonroot user, the CA bundle, /tmp,
// and for a cgo binary its ELF interpreter and every shared library it links (as the build
// machine resolves them; the Dockerfile uses distroless/base instead).
func baseLayer(spec Spec, bin string) (v1.Layer, error) {
	files := []file{
		{path: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
	}
	ca, err := os.ReadFile(caBundle)
	if err != nil {
		return nil, fmt.Errorf("the images carry the build machine's CA bundle (Debian: apt-get install ca-certificates): %w", err)
	}
	files = append(files, file{path: caBundle, mode: 0o644, data: ca})
	if spec.CGO {
		libs, err := sharedLibraries(bin)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			data, err := os.ReadFile(lib)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", lib, err)
			}
			files = append(files, file{path: lib, mode: 0o755, data: data})
		}
		records, err := packageRecords(libs)
		if err != nil {
			return nil, err
		}
		files = append(files, records...)
	}
	return layer(files, []string{"/tmp", "/home/nonroot"})
}

// packageRecords are the Debian package records of the packages that own libs, where image
// scanners (Trivy, Grype, Syft) read what an image ships: a dpkg status entry per package in
// /var/lib/dpkg/status.d/<package> — the layout distroless uses — and the package's copyright
// file. Without them the copied C library is invisible to a scan (its CVEs never reported).
func packageRecords(libs []string) ([]file, error) {
	owners := map[string]bool{}
	for _, lib := range libs {
		out, err := exec.Command("dpkg-query", "-S", lib).Output()
		if err != nil {
			return nil, fmt.Errorf("which Debian package owns %s (the agent image records its libraries' packages for scanners; build it on Debian or Ubuntu): %w", lib, err)
		}
		// "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
		pkg, _, ok := strings.Cut(strings.TrimSpace(string(out)), ": ")
		if !ok {
			return nil, fmt.Errorf("dpkg-query -S %s: unexpected answer %q", lib, out)
		}
		owners[pkg] = true
	}
	var files []file
	for _, pkg := range sortedKeys(owners) {
		status, err := exec.Command("dpkg-query", "-s", pkg).Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-query -s %s: %w", pkg, err)
		}
		name, _, _ := strings.Cut(pkg, ":")
		files = append(files, file{path: "/var/lib/dpkg/status.d/" + name, mode: 0o644, data: status})
		copyright := "/usr/share/doc/" + name + "/copyright"
		if data, err := os.ReadFile(copyright); err == nil {
			files = append(files, file{path: copyright, mode: 0o644, data: data})
		}
	}
	return files, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// appLayer holds the binary.
func appLayer(bin string) (v1.Layer, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", bin, err)
	}
	return layer([]file{{path: Binary, mode: 0o755, data: data}}, nil)
}

// sharedLibraries lists the ELF interpreter and the libraries bin links, as paths on this
// machine (ldd's resolution, the dynamic loader's own).
func sharedLibraries(bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("reading %s as ELF: %w", bin, err)
	}
	defer func() { _ = f.Close() }()
	interp, err := Interpreter(f)
	if err != nil {
		return nil, err
	}
	if interp == "" {
		return nil, fmt.Errorf("%s is static; a cgo build links the C library", bin)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	seen := map[string]bool{interp: true}
	libs := []string{interp}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
		fields := strings.Fields(sc.Text())
		for _, f := range fields {
			if strings.HasPrefix(f, "/") && !seen[f] {
				seen[f] = true
				libs = append(libs, f)
			}
		}
		if strings.Contains(sc.Text(), "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(sc.Text()))
		}
	}
	sort.Strings(libs[1:])
	return libs, nil
}

// Interpreter is the ELF program interpreter f asks for ("" for a static binary).
func Interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("reading the ELF interpreter: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// layer is an uncompressed tar of files (and their parent folders) and dirs, with fixed
// owners and times so the same inputs give the same digest.
func layer(files []file, dirs []string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	var errs []error
	mkdir := func(dir string, mode int64) {
		var parents []string
		for d := dir; d != "/" && d != "." && !made[d]; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			made[parents[i]] = true
			m := int64(0o755)
			if i == 0 {
				m = mode
			}
			errs = append(errs, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(parents[i], "/") + "/", Mode: m, ModTime: time.Unix(0, 0)}))
		}
	}
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		mkdir(d, mode)
	}
	for _, f := range files {
		mkdir(filepath.Dir(f.path), 0o755)
		errs = append(errs, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}))
		_, err := tw.Write(f.data)
		errs = append(errs, err)
	}
	errs = append(errs, tw.Close())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
