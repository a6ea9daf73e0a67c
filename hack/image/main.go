// Command image builds berth's container images as image archives, without Docker: the
// static `berth` image (controller, scaler, doctor, nodepools…) and the cgo `berth-agent`
// image (the node GPU agent). Each archive loads with `docker load`, `kind load
// image-archive`, `ctr images import` or go-containerregistry (`crane push archive.tar
// ghcr.io/…` publishes it); the digest printed is the one the registry will show, for the
// chart's image.digest. The Dockerfile at the repository root builds the same images in a
// registry pipeline. Run by `make image`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	root := fs.String("root", "../..", "the repository root")
	out := fs.String("out", "bin/images", "folder for the archives (relative to -root)")
	registry := fs.String("registry", "ghcr.io/berth-dev", "registry and namespace the images are tagged for")
	version := fs.String("version", "dev", "version stamped into the binary and used as the tag")
	commit := fs.String("commit", "unknown", "commit stamped into the binary and the labels")
	arch := fs.String("arch", runtime.GOARCH, "target architecture (linux); berth-agent builds only for this machine's")
	only := fs.String("only", "", "build only this image (berth or berth-agent)")
	sbom := fs.Bool("sbom", false, "also write each image's SPDX 2.3 SBOM (Go modules and Debian packages it ships) beside its archive, as <name>-<arch>.spdx.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rootDir, err := filepath.Abs(*root)
	if err != nil {
		return fmt.Errorf("resolving -root: %w", err)
	}
	outDir := *out
	if !filepath.IsAbs(outDir) {
		outDir = filepath.Join(rootDir, outDir)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", outDir, err)
	}
	work, err := os.MkdirTemp("", "berth-image-")
	if err != nil {
		return fmt.Errorf("creating a scratch folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()

	opt := Options{Root: rootDir, Arch: *arch, Version: *version, Commit: *commit, Work: work, Log: os.Stderr}
	var errs []error
	for _, spec := range Specs {
		if *only != "" && spec.Name != *only {
			continue
		}
		if spec.CGO && *arch != runtime.GOARCH {
			errs = append(errs, fmt.Errorf("%s needs cgo and builds only for linux/%s here (use the Dockerfile for linux/%s)", spec.Name, runtime.GOARCH, *arch))
			continue
		}
		path, digest, err := Write(spec, opt, *registry, outDir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("%s\t%s\n", path, digest)
		if *sbom {
			doc, err := writeSBOM(path, *registry+"/"+spec.Name, *version)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Printf("%s\t%s\n", doc, digest)
		}
	}
	return errors.Join(errs...)
}

// writeSBOM writes the SBOM of the image in archive (repository repo, tag version) beside it and
// returns its path.
func writeSBOM(archive, repo, version string) (string, error) {
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", archive, err)
	}
	distro, err := HostDistro()
	if err != nil {
		return "", err
	}
	doc, err := SBOM(repo, version, img, time.Unix(0, 0), distro)
	if err != nil {
		return "", fmt.Errorf("%s: %w", archive, err)
	}
	out := strings.TrimSuffix(archive, ".tar") + ".spdx.json"
	if err := os.WriteFile(out, doc, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", out, err)
	}
	return out, nil
}

// Write builds spec's image and writes it to <outDir>/<name>-<arch>.tar, tagged
// <registry>/<name>:<version>; it returns the archive's path and the image's digest.
func Write(spec Spec, opt Options, registry, outDir string) (string, string, error) {
	if opt.Created.IsZero() {
		opt.Created = time.Unix(0, 0).UTC()
	}
	img, err := Build(spec, opt)
	if err != nil {
		return "", "", err
	}
	tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", registry, spec.Name, opt.Version))
	if err != nil {
		return "", "", fmt.Errorf("%s: tag: %w", spec.Name, err)
	}
	path := filepath.Join(outDir, fmt.Sprintf("%s-%s.tar", spec.Name, opt.Arch))
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return "", "", fmt.Errorf("%s: writing %s: %w", spec.Name, path, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", "", fmt.Errorf("%s: digest: %w", spec.Name, err)
	}
	return path, digest.String(), nil
}
