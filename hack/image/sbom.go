package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
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

// Distro is the distribution the image's Debian packages come from (the build machine's, whose
// libraries hack/image copies), as /etc/os-release names it.
type Distro struct {
	// ID is the distribution (debian, ubuntu), VersionID its release (12, 24.04), Name its
	// name (Debian GNU/Linux).
	ID, VersionID, Name string
}

// HostDistro reads the build machine's /etc/os-release.
func HostDistro() (Distro, error) {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return Distro{}, fmt.Errorf("sbom: the build machine's distribution: %w", err)
	}
	f := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			f[k] = strings.Trim(v, `"'`)
		}
	}
	if f["ID"] == "" {
		return Distro{}, errors.New("sbom: /etc/os-release names no ID")
	}
	return Distro{ID: f["ID"], VersionID: f["VERSION_ID"], Name: f["NAME"]}, nil
}

// SBOM is the SPDX 2.3 JSON document of what img — image repo (ghcr.io/berth-dev/berth) at
// version — ships, read from its filesystem as a scanner reads it: each Go binary's build
// information (the Go standard library at the toolchain's version, the main module at the
// stamped version, every module it was built from) and each Debian package with a dpkg status
// entry in /var/lib/dpkg/status.d (the agent's C libraries, from distro), each with its package
// URL.
func SBOM(repo, version string, img v1.Image, created time.Time, distro Distro) ([]byte, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("sbom: image digest: %w", err)
	}
	pkgs, err := imagePackages(img, version, distro)
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

// imagePackages are the packages in img's flattened filesystem, sorted by package URL; the
// main module is given version (what the binary was stamped with, whatever its build
// information says of the checkout).
func imagePackages(img v1.Image, version string, distro Distro) ([]spdxPackage, error) {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	byPURL := map[string]spdxPackage{}
	add := func(name, ver, purl, supplier string) {
		byPURL[purl] = spdxPackage{Name: name, VersionInfo: ver, DownloadLocation: "NOASSERTION", Supplier: supplier,
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", purl}}}
	}
	golang := func(path, ver string) {
		add(path, ver, "pkg:golang/"+path+"@"+purlVersion(ver), "")
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
			purl, supplier := debPURL(f, distro)
			add(f["Package"], f["Version"], purl, supplier)
		case h.Mode&0o111 != 0:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("sbom: %s: %w", name, err)
			}
			bi, err := buildinfo.Read(bytes.NewReader(data))
			if err != nil {
				continue // not a Go binary
			}
			goVersion := strings.TrimPrefix(bi.GoVersion, "go")
			add("go", goVersion, "pkg:golang/stdlib@"+purlVersion(goVersion), "")
			golang(bi.Main.Path, version)
			for _, d := range bi.Deps {
				if d.Replace != nil {
					d = d.Replace
				}
				if d.Version == "" {
					continue // replaced by a local folder: no module version to name
				}
				golang(d.Path, d.Version)
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

// debPURL is the package URL and supplier of the Debian package whose dpkg status fields are f,
// from distro: pkg:deb/<id>/<name>@<version>?arch=<arch>&distro=<id>-<release>.
func debPURL(f map[string]string, distro Distro) (purl, supplier string) {
	purl = "pkg:deb/" + distro.ID + "/" + f["Package"] + "@" + purlVersion(f["Version"])
	var q []string
	if a := f["Architecture"]; a != "" {
		q = append(q, "arch="+a)
	}
	if distro.VersionID != "" {
		q = append(q, "distro="+distro.ID+"-"+distro.VersionID)
	}
	if len(q) > 0 {
		purl += "?" + strings.Join(q, "&")
	}
	if distro.Name != "" {
		supplier = "Organization: " + distro.Name
	}
	return purl, supplier
}

// purlVersion is v as a package URL's version: percent-encoded, '+' included.
func purlVersion(v string) string {
	return strings.ReplaceAll(url.PathEscape(v), "+", "%2B")
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
