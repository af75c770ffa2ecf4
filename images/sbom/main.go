// Command sbom writes an SPDX 2.3 JSON software bill of materials for Go
// binaries, from the build information the Go toolchain embeds in them
// (debug/buildinfo: the main module, every dependency module with its
// version and go.sum hash, the Go version, the build settings). The
// binaries-only image (images/podmpi.Dockerfile) ships its output as
// /opt/podmpi/sbom/podmpi.spdx.json, next to the plain "go version -m" text.
//
//	go run ./images/sbom [-created RFC3339] [-version V] [-o file] BINARY...
//
// The document is deterministic for the same binaries and -created: its
// namespace is derived from the binaries' SHA-256 sums. Licenses are
// NOASSERTION (the build information does not carry them; NOTICE names them).
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// SPDX 2.3 JSON, the fields this tool writes.
type document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	Packages          []pkg          `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
}

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX element ID (letters, digits, '.', '-') from parts.
func spdxID(parts ...string) string {
	return "SPDXRef-" + strings.Trim(idUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-"), "-")
}

// purl is the package URL of a Go module (the purl spec's golang type).
func purl(path, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}

// binary is one input: its name, SHA-256 and build information.
type binary struct {
	name   string
	sha256 string
	info   *debug.BuildInfo
}

func readBinary(path string) (binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return binary{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return binary{}, fmt.Errorf("reading %s: %w", path, err)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return binary{}, fmt.Errorf("%s: no Go build information (not a Go binary, or built without module support): %w", path, err)
	}
	return binary{name: filepath.Base(path), sha256: hex.EncodeToString(h.Sum(nil)), info: info}, nil
}

// build assembles the document for bins.
func build(bins []binary, created time.Time, version string) document {
	ns := sha256.New()
	for _, b := range bins {
		fmt.Fprintf(ns, "%s %s\n", b.name, b.sha256)
	}
	names := make([]string, len(bins))
	for i, b := range bins {
		names[i] = b.name
	}
	doc := document{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "podmpi " + strings.Join(names, ", "),
		DocumentNamespace: "https://github.com/podmpi/podmpi/sbom/" + hex.EncodeToString(ns.Sum(nil))[:32],
		CreationInfo: creationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: podmpi-images-sbom", "Organization: podmpi"},
		},
	}
	modules := map[string]pkg{} // by SPDX ID, shared between binaries
	for _, b := range bins {
		bid := spdxID("File", b.name)
		main := b.info.Main
		if version != "" && (main.Version == "" || main.Version == "(devel)") {
			main.Version = version // built without VCS stamping: the release
		}
		settings := []string{}
		for _, s := range b.info.Settings {
			settings = append(settings, s.Key+"="+s.Value)
		}
		doc.Packages = append(doc.Packages, pkg{
			Name:             b.name,
			SPDXID:           bid,
			VersionInfo:      main.Version,
			Supplier:         "Organization: podmpi",
			DownloadLocation: "https://" + main.Path,
			Checksums:        []checksum{{Algorithm: "SHA256", Value: b.sha256}},
			LicenseConcluded: noAssertion,
			LicenseDeclared:  "Apache-2.0",
			CopyrightText:    noAssertion,
			PrimaryPurpose:   "APPLICATION",
			Comment:          fmt.Sprintf("Go binary of %s, built with %s (%s)", b.info.Path, b.info.GoVersion, strings.Join(settings, " ")),
			ExternalRefs:     []externalRef{{"PACKAGE-MANAGER", "purl", purl(main.Path, main.Version)}},
		})
		doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", bid})
		// The Go standard library and runtime are part of every binary.
		std := spdxID("Package", "golang-stdlib", b.info.GoVersion)
		modules[std] = pkg{
			Name: "stdlib", SPDXID: std, VersionInfo: b.info.GoVersion, Supplier: "Organization: Google LLC",
			DownloadLocation: "https://go.dev/dl/", LicenseConcluded: noAssertion, LicenseDeclared: "BSD-3-Clause",
			CopyrightText: noAssertion, PrimaryPurpose: "LIBRARY",
			ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", purl("stdlib", b.info.GoVersion)}},
		}
		doc.Relationships = append(doc.Relationships, relationship{bid, "DEPENDS_ON", std})
		for _, d := range b.info.Deps {
			m := d
			comment := ""
			if d.Replace != nil {
				comment = fmt.Sprintf("replaced by %s %s", d.Replace.Path, d.Replace.Version)
				m = d.Replace
			}
			id := spdxID("Package", m.Path, m.Version)
			p := pkg{
				Name: m.Path, SPDXID: id, VersionInfo: m.Version,
				DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
				LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
				PrimaryPurpose: "LIBRARY", Comment: comment,
				ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", purl(m.Path, m.Version)}},
			}
			if m.Sum != "" {
				p.Comment = strings.TrimSpace(p.Comment + " go.sum " + m.Sum)
			}
			modules[id] = p
			doc.Relationships = append(doc.Relationships, relationship{bid, "DEPENDS_ON", id})
		}
	}
	ids := make([]string, 0, len(modules))
	for id := range modules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, modules[id])
	}
	return doc
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	createdFlag := fs.String("created", "", "creation time (RFC 3339; default: SOURCE_DATE_EPOCH, else now)")
	out := fs.String("o", "", "output file (default: standard output)")
	version := fs.String("version", "", "version of the binaries when their build information says (devel)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: sbom [-created RFC3339] [-version V] [-o file] BINARY [BINARY ...]")
	}
	created := time.Now()
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		var sec int64
		if _, err := fmt.Sscan(v, &sec); err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", v, err)
		}
		created = time.Unix(sec, 0)
	}
	if *createdFlag != "" && *createdFlag != "unknown" {
		t, err := time.Parse(time.RFC3339, *createdFlag)
		if err != nil {
			return fmt.Errorf("-created %q: want RFC 3339 (2026-01-02T15:04:05Z): %w", *createdFlag, err)
		}
		created = t
	}
	var bins []binary
	for _, p := range fs.Args() {
		b, err := readBinary(p)
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}
	js, err := json.MarshalIndent(build(bins, created, *version), "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	if *out == "" {
		_, err = stdout.Write(js)
		return err
	}
	return os.WriteFile(*out, js, 0o644)
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}
