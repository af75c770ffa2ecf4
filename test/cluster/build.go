package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Builder builds the cluster's binaries from the Go module proxy, each into
// <cache>/bin/<component>-<version>/ with a stamp file written last, so a
// warm start finds them and an interrupted build is redone.
type Builder struct {
	L   Layout
	Log io.Writer
}

const stampFile = ".built"

func (b *Builder) logf(format string, a ...any) { fmt.Fprintf(b.Log, format+"\n", a...) }

// cached reports whether dir holds a complete build of every binary.
func cached(dir string, bins ...string) bool {
	if _, err := os.Stat(filepath.Join(dir, stampFile)); err != nil {
		return false
	}
	for _, n := range bins {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// goCmd runs the go command with the module proxy settings of the machine,
// logging to the build's log file.
func (b *Builder) goCmd(ctx context.Context, dir, logFile string, env []string, args ...string) error {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "\n$ (cd %s) go %s\n", dir, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w; last lines of %s:\n%s", strings.Join(args, " "), dir, err, logFile, tail(logFile, 20))
	}
	return nil
}

// ModuleInfo is what `go mod download -json` says of a module version.
type ModuleInfo struct {
	Path, Version, Dir, GoMod, Error string
}

// Download fetches mod@version into the module cache and returns where.
func (b *Builder) Download(ctx context.Context, mod, version string) (ModuleInfo, error) {
	tmp, err := os.MkdirTemp("", "podmpi-cluster-dl-")
	if err != nil {
		return ModuleInfo{}, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	var mi ModuleInfo
	if jerr := json.Unmarshal(out, &mi); jerr != nil && err == nil {
		err = jerr
	}
	if mi.Error != "" {
		return mi, fmt.Errorf("module proxy: %s@%s: %s", mod, version, mi.Error)
	}
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return mi, fmt.Errorf("go mod download %s@%s: %v %s", mod, version, err, msg)
	}
	return mi, nil
}

// Kubernetes builds kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kubectl of version v from the k8s.io/kubernetes module: a
// scratch module requires it and replaces every staging module (k8s.io/api,
// k8s.io/client-go, ...) with its published twin of the same minor, as the
// Kubernetes go.mod points them at ./staging. The version is stamped so that
// `kubectl version` and the API server report it.
func (b *Builder) Kubernetes(ctx context.Context, v string) (string, error) {
	bins := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}
	out := filepath.Join(b.L.Bin(), "kubernetes-"+v)
	if cached(out, bins...) {
		return out, nil
	}
	start := time.Now()
	b.logf("== building Kubernetes %s (%s) from the module proxy; about 10 minutes on 2 cores when cold", v, strings.Join(bins, ", "))
	mi, err := b.Download(ctx, "k8s.io/kubernetes", v)
	if err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(mi.GoMod)
	if err != nil {
		return "", err
	}
	staging := regexp.MustCompile(`(?m)^\s*(k8s\.io/[a-z0-9-]+)\s*=>\s*\./staging/`).FindAllStringSubmatch(string(gomod), -1)
	if len(staging) == 0 {
		return "", fmt.Errorf("k8s.io/kubernetes %s: no staging replace lines in %s", v, mi.GoMod)
	}
	twin := "v0." + strings.TrimPrefix(v, "v1.")
	var sb strings.Builder
	fmt.Fprintf(&sb, "module podmpi.local/build/kubernetes\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", v)
	for _, m := range staging {
		fmt.Fprintf(&sb, "\t%s => %s %s\n", m[1], m[1], twin)
	}
	sb.WriteString(")\n")
	src := filepath.Join(b.L.Src(), "kubernetes-"+v)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	var imports strings.Builder
	imports.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, n := range bins {
		fmt.Fprintf(&imports, "\t_ \"k8s.io/kubernetes/cmd/%s\"\n", n)
	}
	imports.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(sb.String()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(imports.String()), 0o644); err != nil {
		return "", err
	}
	logFile := filepath.Join(b.L.Src(), "kubernetes-"+v+".log")
	if err := b.goCmd(ctx, src, logFile, nil, "mod", "tidy"); err != nil {
		return "", fmt.Errorf("%w\n(a staging module missing at %s on the proxy is the usual cause: the log names it)", err, twin)
	}
	tmpOut := out + ".tmp"
	_ = os.RemoveAll(tmpOut)
	if err := os.MkdirAll(tmpOut, 0o755); err != nil {
		return "", err
	}
	ld := fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%[1]s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%[2]s -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=%[1]s -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=%[2]s", v, Minor(v))
	args := []string{"build", "-ldflags", ld, "-o", tmpOut + "/"}
	for _, n := range bins {
		args = append(args, "k8s.io/kubernetes/cmd/"+n)
	}
	if err := b.goCmd(ctx, src, logFile, nil, args...); err != nil {
		return "", err
	}
	if err := finish(tmpOut, out); err != nil {
		return "", err
	}
	b.logf("== built Kubernetes %s in %s", v, time.Since(start).Round(time.Second))
	return out, nil
}

// Module builds the main package pkg (relative to the module root) of
// mod@version as released: in the module's own folder, with its own go.mod
// and go.sum, so the dependencies are exactly the release's.
func (b *Builder) Module(ctx context.Context, name, mod, version, pkg, bin string, ldflags string) (string, error) {
	out := filepath.Join(b.L.Bin(), name+"-"+version)
	if cached(out, bin) {
		return filepath.Join(out, bin), nil
	}
	start := time.Now()
	b.logf("== building %s %s (%s) from the module proxy", name, version, mod)
	mi, err := b.Download(ctx, mod, version)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(b.L.Src(), 0o755); err != nil {
		return "", err
	}
	tmpOut := out + ".tmp"
	_ = os.RemoveAll(tmpOut)
	if err := os.MkdirAll(tmpOut, 0o755); err != nil {
		return "", err
	}
	logFile := filepath.Join(b.L.Src(), name+"-"+version+".log")
	args := []string{"build", "-ldflags", "-s -w " + ldflags, "-o", filepath.Join(tmpOut, bin), pkg}
	if err := b.goCmd(ctx, mi.Dir, logFile, []string{"GOFLAGS=-buildvcs=false -mod=readonly"}, args...); err != nil {
		return "", err
	}
	if err := finish(tmpOut, out); err != nil {
		return "", err
	}
	b.logf("== built %s %s in %s", name, version, time.Since(start).Round(time.Second))
	return filepath.Join(out, bin), nil
}

// finish stamps a finished build and moves it into place.
func finish(tmp, out string) error {
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(out)
	return os.Rename(tmp, out)
}

// ModuleDir returns the module cache folder of mod@version (downloading it).
func (b *Builder) ModuleDir(ctx context.Context, mod, version string) (string, error) {
	mi, err := b.Download(ctx, mod, version)
	if err != nil {
		return "", err
	}
	return mi.Dir, nil
}

// RequiredVersion reads the version of dep that the go.mod of mod@version
// requires.
func (b *Builder) RequiredVersion(ctx context.Context, mod, version, dep string) (string, error) {
	mi, err := b.Download(ctx, mod, version)
	if err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(mi.GoMod)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(dep) + `\s+(v\S+)`).FindSubmatch(gomod)
	if m == nil {
		return "", fmt.Errorf("%s@%s: go.mod does not require %s", mod, version, dep)
	}
	return string(m[1]), nil
}

// The Go-built components.
const (
	TrainerModule     = "github.com/kubeflow/trainer/v2"
	JobSetModule      = "sigs.k8s.io/jobset"
	MPIOperatorModule = "github.com/kubeflow/mpi-operator"
	CoreDNSModule     = "github.com/coredns/coredns"
	KueueModule       = "sigs.k8s.io/kueue"
	KubeRouterModule  = "github.com/cloudnativelabs/kube-router/v2"
)

// CoreDNS builds coredns as released (all its default plugins).
func (b *Builder) CoreDNS(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "coredns", CoreDNSModule, v, ".", "coredns", "-X github.com/coredns/coredns/coremain.GitCommit="+v)
}

// Trainer builds Trainer's controller manager.
func (b *Builder) Trainer(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "trainer", TrainerModule, v, "./cmd/trainer-controller-manager", "trainer-controller-manager", "")
}

// JobSet builds JobSet's controller manager.
func (b *Builder) JobSet(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "jobset", JobSetModule, v, ".", "jobset-controller-manager", "-X sigs.k8s.io/jobset/pkg/version.GitVersion="+v)
}

// MPIOperator builds mpi-operator.
func (b *Builder) MPIOperator(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "mpi-operator", MPIOperatorModule, v, "./cmd/mpi-operator", "mpi-operator", "")
}

// Kueue builds Kueue's controller manager.
func (b *Builder) Kueue(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "kueue", KueueModule, v, "./cmd/kueue", "kueue", "-X sigs.k8s.io/kueue/pkg/version.GitVersion="+v)
}

// KubeRouter builds kube-router (the cluster runs only its NetworkPolicy
// firewall).
func (b *Builder) KubeRouter(ctx context.Context, v string) (string, error) {
	return b.Module(ctx, "kube-router", KubeRouterModule, v, "./cmd/kube-router", "kube-router", "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version="+v)
}
