package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// buildLauncher builds cmd/launcher (a Go binary with real dependencies)
// into a temporary directory.
func buildLauncher(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build a binary to describe")
	}
	out := filepath.Join(t.TempDir(), "launcher")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out, "./cmd/launcher")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/launcher: %v\n%s", err, o)
	}
	return out
}

var spdxIDRe = regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)

func TestSPDXDocument(t *testing.T) {
	bin := buildLauncher(t)
	var out bytes.Buffer
	if err := run([]string{"-created", "2026-01-02T03:04:05Z", "-version", "v9.8.7", bin}, &out); err != nil {
		t.Fatal(err)
	}
	var doc document
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("output is not the SPDX JSON this tool writes: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" ||
		doc.CreationInfo.Created != "2026-01-02T03:04:05Z" || !strings.HasPrefix(doc.DocumentNamespace, "https://") {
		t.Errorf("document header: %+v", doc)
	}
	ids := map[string]pkg{}
	for _, p := range doc.Packages {
		if !spdxIDRe.MatchString(p.SPDXID) {
			t.Errorf("package %s: SPDXID %q is not a valid SPDX ID", p.Name, p.SPDXID)
		}
		if _, dup := ids[p.SPDXID]; dup {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = p
		if p.DownloadLocation == "" || p.LicenseConcluded == "" || p.LicenseDeclared == "" || p.CopyrightText == "" {
			t.Errorf("package %s lacks a required field: %+v", p.Name, p)
		}
	}
	if p := ids["SPDXRef-File-launcher"]; p.VersionInfo != "v9.8.7" || len(p.Checksums) != 1 || p.Checksums[0].Algorithm != "SHA256" {
		t.Errorf("the binary's package: %+v, want version v9.8.7 and its SHA-256", p)
	}
	describes, deps := 0, map[string]bool{}
	for _, r := range doc.Relationships {
		if _, ok := ids[r.Related]; !ok {
			t.Errorf("relationship %+v points at no package", r)
		}
		switch r.Type {
		case "DESCRIBES":
			describes++
		case "DEPENDS_ON":
			deps[ids[r.Related].Name] = true
		}
	}
	if describes != 1 {
		t.Errorf("%d DESCRIBES relationships, want 1 (one binary)", describes)
	}
	// What the launcher really links, with the version go.mod requires.
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*golang.org/x/crypto (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod does not require golang.org/x/crypto")
	}
	found := false
	for _, p := range doc.Packages {
		if p.Name == "golang.org/x/crypto" {
			found = true
			if p.VersionInfo != string(m[1]) || len(p.ExternalRefs) != 1 || p.ExternalRefs[0].Locator != "pkg:golang/golang.org/x/crypto@"+string(m[1]) {
				t.Errorf("golang.org/x/crypto: %+v, want version %s and its purl", p, m[1])
			}
			if !strings.Contains(p.Comment, "go.sum h1:") {
				t.Errorf("golang.org/x/crypto: no go.sum hash in %q", p.Comment)
			}
		}
	}
	if !found || !deps["golang.org/x/crypto"] || !deps["stdlib"] {
		t.Errorf("the launcher's x/crypto and the standard library are not listed as dependencies: %v", deps)
	}
	// Deterministic for the same input.
	var again bytes.Buffer
	if err := run([]string{"-created", "2026-01-02T03:04:05Z", "-version", "v9.8.7", bin}, &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("two runs on the same binary differ")
	}
}

func TestSPDXRefusesBadInput(t *testing.T) {
	notGo := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{notGo}, "no Go build information"},
		{[]string{filepath.Join(t.TempDir(), "missing")}, "no such file"},
		{[]string{"-created", "yesterday", notGo}, "want RFC 3339"},
	} {
		err := run(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestSPDXIDAndPurl(t *testing.T) {
	if got := spdxID("Package", "github.com/a/b", "v1.2.3+incompatible"); got != "SPDXRef-Package-github.com-a-b-v1.2.3-incompatible" {
		t.Errorf("spdxID = %q", got)
	}
	if got := purl("github.com/a/b", "(devel)"); got != "pkg:golang/github.com/a/b" {
		t.Errorf("purl = %q", got)
	}
}
