package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// SPDX 2.3, the parts an SBOM of an image needs (https://spdx.github.io/spdx-spec/v2.3/).
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string        `json:"SPDXID"`
	Name             string        `json:"name"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Supplier         string        `json:"supplier,omitempty"`
	ExternalRefs     []spdxExtRef  `json:"externalRefs,omitempty"`
	Checksums        []spdxSummary `json:"checksums,omitempty"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxSummary struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM is the SPDX 2.3 JSON document of what img — image repo (ghcr.io/berth-dev/berth) at
// version — ships, read from its filesystem as a scanner reads it: each Go binary's build
// information (the Go standard library at the toolchain's version, the main module at the
// stamped version, every module it was built from) and each Debian package with a dpkg status
// entry in /var/lib/dpkg/status.d (the agent's C libraries), each with its package URL.
func SBOM(repo, version string, img v1.Image, created time.Time) ([]byte, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("sbom: image digest: %w", err)
	}
	pkgs, err := imagePackages(img, version)
	if err != nil {
		return nil, err
	}
	short := path.Base(repo)
	root := spdxPackage{SPDXID: "SPDXRef-image", Name: short, VersionInfo: version, DownloadLocation: "NOASSERTION",
		Checksums:    []spdxSummary{{Algorithm: "SHA256", Value: digest.Hex}},
		ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:oci/" + short + "@" + url.QueryEscape(digest.String()) + "?repository_url=" + url.QueryEscape(repo) + "&tag=" + url.QueryEscape(version)}}}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: short + "-" + version,
		DocumentNamespace: "https://github.com/berth-dev/berth/spdx/" + short + "/" + version + "/" + digest.Hex,
		CreationInfo:      spdxCreationInfo{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Organization: berth", "Tool: berth-hack-image"}},
		Packages:          append([]spdxPackage{root}, pkgs...),
		Relationships:     []spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-image"}},
	}
	for _, p := range pkgs {
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-image", "CONTAINS", p.SPDXID})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	return append(out, '\n'), nil
}

// imagePackages are the packages in img's flattened filesystem, sorted by package URL; a main
// module built from source reports (devel) and is given version.
func imagePackages(img v1.Image, version string) ([]spdxPackage, error) {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	byPURL := map[string]spdxPackage{}
	add := func(name, ver, purl, supplier string) {
		byPURL[purl] = spdxPackage{Name: name, VersionInfo: ver, DownloadLocation: "NOASSERTION", Supplier: supplier,
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", purl}}}
	}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sbom: reading the image's files: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := "/" + strings.TrimPrefix(h.Name, "/")
		switch {
		case strings.HasPrefix(name, "/var/lib/dpkg/status.d/") && !strings.HasSuffix(name, ".md5sums"):
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("sbom: %s: %w", name, err)
			}
			f := dpkgFields(data)
			if f["Package"] == "" || f["Version"] == "" {
				return nil, fmt.Errorf("sbom: %s is no dpkg status entry", name)
			}
			purl := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", f["Package"], url.QueryEscape(f["Version"]), f["Architecture"])
			add(f["Package"], f["Version"], purl, "Organization: Debian")
		case h.Mode&0o111 != 0:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("sbom: %s: %w", name, err)
			}
			bi, err := buildinfo.Read(bytes.NewReader(data))
			if err != nil {
				continue // not a Go binary
			}
			add("go", bi.GoVersion, "pkg:golang/stdlib@"+bi.GoVersion, "")
			main := bi.Main.Version
			if main == "" || main == "(devel)" {
				main = version
			}
			add(bi.Main.Path, main, "pkg:golang/"+bi.Main.Path+"@"+main, "")
			for _, d := range bi.Deps {
				if d.Replace != nil {
					d = d.Replace
				}
				add(d.Path, d.Version, "pkg:golang/"+d.Path+"@"+d.Version, "")
			}
		}
	}
	purls := make([]string, 0, len(byPURL))
	for p := range byPURL {
		purls = append(purls, p)
	}
	sort.Strings(purls)
	out := make([]spdxPackage, 0, len(purls))
	for i, p := range purls {
		pkg := byPURL[p]
		pkg.SPDXID = fmt.Sprintf("SPDXRef-Package-%d", i+1)
		out = append(out, pkg)
	}
	return out, nil
}

// dpkgFields are the fields of one dpkg status entry (continuation lines dropped).
func dpkgFields(data []byte) map[string]string {
	f := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}
