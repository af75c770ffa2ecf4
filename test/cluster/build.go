package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Builder builds the cluster's binaries from the Go module proxy, each into
// <cache>/bin/<component>-<version>/ with a stamp file written last, so a
// warm start finds them and an interrupted build is redone.
type Builder struct {
	L    Layout
	Log  io.Writer
	Pins Pins
	// Nice runs the go commands at the lowest CPU priority (nice 19): a
	// build behind the tests (podmpi-cluster run --build-behind) takes
	// only the CPU they leave idle.
	Nice bool

	sharedMu sync.Mutex
	shared   []Part
	buildMu  sync.Mutex // one go build at a time in the shared module
}

const stampFile = ".built"

func (b *Builder) logf(format string, a ...any) { fmt.Fprintf(b.Log, format+"\n", a...) }

// cached reports whether dir holds a complete build of every binary whose
// stamp has the line id (any stamp when id is "").
func cached(dir, id string, bins ...string) bool {
	stamp, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || (id != "" && !slices.Contains(strings.Split(string(stamp), "\n"), id)) {
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
	cmd := b.command(ctx, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w; last lines of %s:\n%s", strings.Join(args, " "), dir, err, logFile, tail(logFile, 20))
	}
	return nil
}

// command is the go command with args, niced when b.Nice, in a process
// group of its own. Cancelling ctx interrupts the whole group (SIGINT, as
// ^C would: the compilers and linkers end, and go removes its work
// folder), then kills go if it has not ended within commandGrace; this
// process's death kills go too.
func (b *Builder) command(ctx context.Context, args ...string) *exec.Cmd {
	name := "go"
	if b.Nice {
		name, args = "nice", append([]string{"-n", "19", "go"}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = commandGrace
	return cmd
}

const commandGrace = 30 * time.Second

// lock holds an exclusive lock on <cache>/bin/.<name>.lock until the
// returned function is called: two podmpi-cluster processes (a build behind
// the tests and the tests' own `controllers`) build a part once, the second
// waiting for the first and then finding it built. The wait ends with ctx
// or after lockWait.
func (b *Builder) lock(ctx context.Context, name string) (func(), error) {
	if err := os.MkdirAll(b.L.Bin(), 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(b.L.Bin(), "."+strings.ReplaceAll(name, " ", "-")+".lock")
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for said := false; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if said {
				b.logf("== %s: the other build ended after %s", name, time.Since(start).Round(time.Second))
			}
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", file, err)
		}
		if !said {
			b.logf("== %s: another podmpi-cluster builds it (lock %s); waiting for it", name, file)
			said = true
		}
		if time.Since(start) > lockWait {
			f.Close()
			return nil, fmt.Errorf("%s: another podmpi-cluster has held %s for %s: a build that long is stuck; find it with fuser %s", name, file, lockWait, file)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// lockWait bounds the wait for another process's build: the longest, all
// of Kubernetes from an empty cache on a loaded 2-core machine, takes
// about 25 minutes.
const lockWait = 45 * time.Minute

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
	cmd := b.command(ctx, "mod", "download", "-json", mod+"@"+version)
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

// A Part is one Go-built component of the cluster at one version: the main
// packages to build, in the order of the binaries they make.
type Part struct {
	Name, Module, Version string
	Pkgs, Bins            []string
	LDFlags               string
	// Main, when set, is the source of a main package of our own that
	// builds the part from Module at Version, in a module of its own
	// (ownMainModule; Pkgs names it): the registry with only the storage
	// driver it uses, say, not its every cloud's SDK.
	Main string
}

// Key names the part in logs, step names and the build cache.
func (p Part) Key() string { return p.Name + " " + p.Version }

// Dir is where the part's binaries go.
func (b *Builder) Dir(p Part) string { return filepath.Join(b.L.Bin(), p.Name+"-"+p.Version) }

// Build builds the part, or finds it built, and returns its folder. The
// parts of the shared module (Shared) build there, one at a time; any other
// version builds as released, with its own go.mod and go.sum.
//
// A shared part's stamp names the module it was built in (sharedID): a part
// built as released, or in a shared module of other versions, is built again.
func (b *Builder) Build(ctx context.Context, p Part) (string, error) {
	out := b.Dir(p)
	shared, err := b.Shared(ctx)
	if err != nil {
		return "", err
	}
	if inSet(shared, p) {
		return out, b.BuildShared(ctx, p)
	}
	if p.Name == "kubernetes" || p.Name == "coredns" {
		return "", fmt.Errorf("%s is not the pinned version (%s): it builds only in the shared module", p.Key(), shared[0].Version)
	}
	if p.Main != "" {
		return out, b.buildOwnMain(ctx, p)
	}
	if cached(out, "", p.Bins...) {
		return out, nil
	}
	unlock, err := b.lock(ctx, p.Key())
	if err != nil {
		return "", err
	}
	defer unlock()
	if cached(out, "", p.Bins...) { // built by the process we waited for
		return out, nil
	}
	return out, b.buildReleased(ctx, p)
}

// ownMainModule is the module path of a part's own main package.
func ownMainModule(p Part) string { return "podmpi.local/build/" + p.Name }

// buildOwnMain builds a part with a Main (or finds it built from that very
// source): go.mod requiring the part's module at its version and main.go in
// <cache>/src/<name>-<version>-main, go mod tidy there (so the dependencies
// are the versions the part's own go.mod asks for), then one go build. The
// stamp names the source's hash, so that another Main is built again.
func (b *Builder) buildOwnMain(ctx context.Context, p Part) error {
	sum := sha256.Sum256([]byte(p.Module + "@" + p.Version + "\n" + p.Main))
	id := "own-main-" + hex.EncodeToString(sum[:6])
	out := b.Dir(p)
	if cached(out, id, p.Bins...) {
		return nil
	}
	unlock, err := b.lock(ctx, p.Key())
	if err != nil {
		return err
	}
	defer unlock()
	if cached(out, id, p.Bins...) { // built by the process we waited for
		return nil
	}
	start := time.Now()
	b.logf("== building %s (%s, a main package of our own) from the module proxy", p.Key(), p.Module)
	dir := filepath.Join(b.L.Src(), p.Name+"-"+p.Version+"-main")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("module %s\n\ngo 1.26.0\n\nrequire %s %s\n", ownMainModule(p), p.Module, p.Version)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.Main), 0o644); err != nil {
		return err
	}
	if err := b.goCmd(ctx, dir, dir+".log", []string{"GOFLAGS=-mod=mod"}, "mod", "tidy"); err != nil {
		return err
	}
	if err := b.goBuild(ctx, dir, []Part{p}, []string{"GOFLAGS=-buildvcs=false -mod=readonly"}, id); err != nil {
		return err
	}
	b.logf("== built %s in %s", p.Key(), time.Since(start).Round(time.Second))
	return nil
}

// inSet reports whether parts has p (by name and version).
func inSet(parts []Part, p Part) bool {
	return slices.ContainsFunc(parts, func(q Part) bool { return q.Key() == p.Key() })
}

// sharedID names the shared module of parts: every module version in it and
// the CoreDNS plugins.
func sharedID(parts []Part) string {
	var ids []string
	for _, p := range parts {
		ids = append(ids, p.Module+"@"+p.Version)
	}
	ids = append(ids, coreDNSPlugins...)
	ids = append(ids, toolModules()...)
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return "shared-" + hex.EncodeToString(sum[:6])
}

// The parts, by component.
func kubernetesPart(v string) Part {
	bins := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}
	p := Part{Name: "kubernetes", Module: "k8s.io/kubernetes", Version: v, Bins: bins,
		// Stamped as the release's own build is, so that `kubectl version`
		// and the API server report it.
		LDFlags: fmt.Sprintf("-X k8s.io/component-base/version.gitVersion=%[1]s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%[2]s -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=%[1]s -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=%[2]s", v, Minor(v))}
	for _, n := range bins {
		p.Pkgs = append(p.Pkgs, "k8s.io/kubernetes/cmd/"+n)
	}
	return p
}

func modulePart(name, mod, v, pkg, bin, ldflags string) Part {
	return Part{Name: name, Module: mod, Version: v, Pkgs: []string{path.Join(mod, pkg)}, Bins: []string{bin}, LDFlags: ldflags}
}

// CoreDNS is built with only the plugins of coreDNSPlugins (its own main
// package, written into the shared module), not with its default plugin
// set, which compiles every cloud provider's SDK.
func coreDNSPart(v string) Part {
	return Part{Name: "coredns", Module: CoreDNSModule, Version: v, Pkgs: []string{sharedModule + "/coredns"}, Bins: []string{"coredns"},
		LDFlags: "-X github.com/coredns/coredns/coremain.GitCommit=" + v}
}

func trainerPart(v string) Part {
	return modulePart("trainer", TrainerModule, v, "cmd/trainer-controller-manager", "trainer-controller-manager", "")
}

func jobSetPart(v string) Part {
	return modulePart("jobset", JobSetModule, v, "", "jobset-controller-manager", "-X sigs.k8s.io/jobset/pkg/version.GitVersion="+v)
}

func mpiOperatorPart(v string) Part {
	return modulePart("mpi-operator", MPIOperatorModule, v, "cmd/mpi-operator", "mpi-operator", "")
}

func kueuePart(v string) Part {
	return modulePart("kueue", KueueModule, v, "cmd/kueue", "kueue", "-X sigs.k8s.io/kueue/pkg/version.GitVersion="+v)
}

func kubeRouterPart(v string) Part {
	return modulePart("kube-router", KubeRouterModule, v, "cmd/kube-router", "kube-router", "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version="+v)
}

// coreDNSPlugins are the CoreDNS plugins built in: kubeadm's Corefile's
// (errors, health, ready, kubernetes, prometheus, forward, cache, loop,
// reload, loadbalance) and bind and log. Each is a package under
// github.com/coredns/coredns/plugin; prometheus is the package metrics.
var coreDNSPlugins = []string{"bind", "cache", "errors", "forward", "health", "kubernetes", "loadbalance", "log", "loop", "metrics", "ready", "reload"}

// sharedModule is the module path of the shared build.
const sharedModule = "podmpi.local/build/shared"

// Shared returns the parts built in one Go module: Kubernetes, CoreDNS and
// the default version of every controller (the first pinned Trainer, the
// JobSet it requires, the first pinned mpi-operator, Kueue, kube-router),
// in the order they build. One module means one build list: the packages
// they have in common (client-go, apimachinery, controller-runtime,
// gRPC, ...) compile once rather than once per controller, and none of them
// compiles twice side by side. The cost: each controller is built with the
// newest version any of them requires of a dependency (its Kubernetes
// libraries at the cluster's Kubernetes), not with exactly its release's
// go.sum. The other pinned versions build as released.
func (b *Builder) Shared(ctx context.Context) ([]Part, error) {
	b.sharedMu.Lock()
	defer b.sharedMu.Unlock()
	if b.shared != nil {
		return b.shared, nil
	}
	p := b.Pins
	if p.Kubernetes == "" || len(p.Trainer) == 0 || len(p.MPIOperator) == 0 {
		return nil, fmt.Errorf("builder: no pins")
	}
	jsv, err := b.RequiredVersion(ctx, TrainerModule, p.Trainer[0], JobSetModule)
	if err != nil {
		return nil, err
	}
	b.shared = []Part{kubernetesPart(p.Kubernetes), coreDNSPart(p.CoreDNS), trainerPart(p.Trainer[0]), jobSetPart(jsv),
		mpiOperatorPart(p.MPIOperator[0]), kueuePart(p.Kueue), kubeRouterPart(p.KubeRouter)}
	return b.shared, nil
}

// BuildShared builds those of parts (all of the shared module) that are not
// built yet, in one go build there, after any other build there (one at a
// time: each reuses what the ones before compiled).
func (b *Builder) BuildShared(ctx context.Context, parts ...Part) error {
	shared, err := b.Shared(ctx)
	if err != nil {
		return err
	}
	id := sharedID(shared)
	b.buildMu.Lock()
	defer b.buildMu.Unlock()
	missing := func() (todo []Part, keys []string) {
		for _, p := range parts {
			if !cached(b.Dir(p), id, p.Bins...) {
				todo = append(todo, p)
				keys = append(keys, p.Key())
			}
		}
		return todo, keys
	}
	if todo, _ := missing(); len(todo) == 0 {
		return nil
	}
	unlock, err := b.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	todo, keys := missing() // less if another process built some meanwhile
	if len(todo) == 0 {
		return nil
	}
	start := time.Now()
	dir, err := b.sharedModuleDir(ctx)
	if err != nil {
		return err
	}
	what := strings.Join(keys, ", ")
	b.logf("== building %s in the shared module %s", what, dir)
	if err := b.goBuild(ctx, dir, todo, nil, id); err != nil {
		return err
	}
	b.logf("== built %s in %s", what, time.Since(start).Round(time.Second))
	return nil
}

// sharedModuleDir writes the shared module (once per set of versions) and
// returns its folder: a go.mod that requires every shared part's module and
// replaces each Kubernetes staging module (k8s.io/api, k8s.io/client-go,
// ...) with its published twin of the same version, as Kubernetes' own
// go.mod points them at ./staging; a tools.go that imports every main
// package; and CoreDNS's main package with coreDNSPlugins.
func (b *Builder) sharedModuleDir(ctx context.Context) (string, error) {
	parts, err := b.Shared(ctx)
	if err != nil {
		return "", err
	}
	id := sharedID(parts)
	dir := filepath.Join(b.L.Src(), id)
	if _, err := os.Stat(filepath.Join(dir, stampFile)); err == nil {
		return dir, nil
	}
	replaces, err := b.stagingReplaces(ctx, parts[0].Version)
	if err != nil {
		return "", err
	}
	files := sharedModuleFiles(parts, replaces, toolModules())
	_ = os.RemoveAll(dir)
	for name, text := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	logFile := dir + ".log"
	if err := b.goCmd(ctx, dir, logFile, []string{"GOFLAGS=-mod=mod"}, "mod", "tidy"); err != nil {
		return "", fmt.Errorf("%w\n(a staging module missing on the proxy at its Kubernetes version is the usual cause: the log names it)", err)
	}
	if gomod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
		if off := unaligned(toolModules(), string(gomod)); len(off) > 0 {
			b.logf("== the shared module has other versions than test/cluster/go.mod of %s: the Kubernetes build compiles again what building podmpi-cluster compiled (go get those versions in test/cluster to share it)", strings.Join(off, ", "))
		}
	}
	return dir, os.WriteFile(filepath.Join(dir, stampFile), []byte(id+"\n"), 0o644)
}

// toolModules are the modules this program was built with ("path version").
// The shared module requires them too, at least at these versions: where
// test/cluster's go.mod has the same versions as the shared module (make
// cluster-tool builds with CGO_ENABLED=0, as the cluster's builds do), what
// building this program compiled (client-go, apimachinery, the API types) is
// found in Go's build cache by the Kubernetes build instead of compiled
// again.
func toolModules() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var out []string
	for _, d := range bi.Deps {
		if d.Replace != nil {
			continue
		}
		out = append(out, d.Path+" "+d.Version)
	}
	return out
}

// unaligned lists the modules of tool ("path version") that gomod requires
// at another version, as "path@version".
func unaligned(tool []string, gomod string) []string {
	have := map[string]string{}
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && strings.HasPrefix(f[1], "v") {
			have[f[0]] = f[1]
		}
	}
	var off []string
	for _, m := range tool {
		f := strings.Fields(m)
		if v, ok := have[f[0]]; ok && v != f[1] {
			off = append(off, f[0]+"@"+v)
		}
	}
	return off
}

// sharedModuleFiles are the files of the shared module, by name: it
// requires every part's module, and the modules in also ("path version").
func sharedModuleFiles(parts []Part, replaces, also []string) map[string]string {
	var mod, tools, dns strings.Builder
	fmt.Fprintf(&mod, "module %s\n\ngo 1.26.0\n\nrequire (\n", sharedModule)
	for _, m := range also {
		fmt.Fprintf(&mod, "\t%s\n", m)
	}
	tools.WriteString("//go:build tools\n\n// Package tools imports every main package the shared module builds.\npackage tools\n\nimport (\n")
	for _, p := range parts {
		fmt.Fprintf(&mod, "\t%s %s\n", p.Module, p.Version)
		for _, pkg := range p.Pkgs {
			if !strings.HasPrefix(pkg, sharedModule+"/") {
				fmt.Fprintf(&tools, "\t_ %q\n", pkg)
			}
		}
	}
	mod.WriteString(")\n\nreplace (\n")
	for _, m := range replaces {
		fmt.Fprintf(&mod, "\t%s\n", m)
	}
	mod.WriteString(")\n")
	tools.WriteString(")\n")
	dns.WriteString("// CoreDNS with only the plugins the cluster's Corefile may use.\npackage main\n\nimport (\n\t\"github.com/coredns/coredns/coremain\"\n\n")
	for _, pl := range coreDNSPlugins {
		fmt.Fprintf(&dns, "\t_ \"github.com/coredns/coredns/plugin/%s\"\n", pl)
	}
	dns.WriteString(")\n\nfunc main() { coremain.Run() }\n")
	return map[string]string{"go.mod": mod.String(), "tools.go": tools.String(), "coredns/main.go": dns.String()}
}

// stagingReplaces are the replace lines that point each staging module of
// k8s.io/kubernetes v at its published twin (v0.36.3 for v1.36.3).
func (b *Builder) stagingReplaces(ctx context.Context, v string) ([]string, error) {
	mi, err := b.Download(ctx, "k8s.io/kubernetes", v)
	if err != nil {
		return nil, err
	}
	gomod, err := os.ReadFile(mi.GoMod)
	if err != nil {
		return nil, err
	}
	staging := regexp.MustCompile(`(?m)^\s*(k8s\.io/[a-z0-9-]+)\s*=>\s*\./staging/`).FindAllStringSubmatch(string(gomod), -1)
	if len(staging) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes %s: no staging replace lines in %s", v, mi.GoMod)
	}
	twin := "v0." + strings.TrimPrefix(v, "v1.")
	var out []string
	for _, m := range staging {
		out = append(out, fmt.Sprintf("%s => %s %s", m[1], m[1], twin))
	}
	return out, nil
}

// buildReleased builds p in its module's own folder, with its own go.mod and
// go.sum, so the dependencies are exactly the release's.
func (b *Builder) buildReleased(ctx context.Context, p Part) error {
	start := time.Now()
	b.logf("== building %s (%s) as released, from the module proxy", p.Key(), p.Module)
	mi, err := b.Download(ctx, p.Module, p.Version)
	if err != nil {
		return err
	}
	if err := b.goBuild(ctx, mi.Dir, []Part{p}, []string{"GOFLAGS=-buildvcs=false -mod=readonly"}, "released"); err != nil {
		return err
	}
	b.logf("== built %s in %s", p.Key(), time.Since(start).Round(time.Second))
	return nil
}

// goBuild runs one go build of the packages of parts in dir, with the
// linker flags of all of them (each -X names a variable of its own part's
// packages; the linker skips those a binary lacks), and moves each part's
// binaries into place, stamped with how they were built (how), once every
// binary is there.
func (b *Builder) goBuild(ctx context.Context, dir string, parts []Part, env []string, how string) error {
	for _, d := range []string{b.L.Src(), b.L.Bin()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp(b.L.Bin(), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ld := []string{"-s", "-w"}
	var pkgs, names []string
	seen := map[string]bool{}
	for _, p := range parts {
		if p.LDFlags != "" {
			ld = append(ld, p.LDFlags)
		}
		names = append(names, p.Name+"-"+p.Version)
		for _, pkg := range p.Pkgs {
			// go build -o dir/ names each binary after its package's last
			// element.
			if seen[path.Base(pkg)] {
				return fmt.Errorf("two packages named %s in one build (%s)", path.Base(pkg), strings.Join(names, ", "))
			}
			seen[path.Base(pkg)] = true
			pkgs = append(pkgs, pkg)
		}
	}
	logFile := filepath.Join(b.L.Src(), strings.Join(names, "+")+".log")
	args := append([]string{"build", "-ldflags", strings.Join(ld, " "), "-o", tmp + "/"}, pkgs...)
	if err := b.goCmd(ctx, dir, logFile, env, args...); err != nil {
		return err
	}
	for _, p := range parts {
		out := b.Dir(p)
		tmpOut := out + ".tmp"
		_ = os.RemoveAll(tmpOut)
		if err := os.MkdirAll(tmpOut, 0o755); err != nil {
			return err
		}
		for i, pkg := range p.Pkgs {
			if err := os.Rename(filepath.Join(tmp, path.Base(pkg)), filepath.Join(tmpOut, p.Bins[i])); err != nil {
				return err
			}
		}
		if err := finish(tmpOut, out, how); err != nil {
			return err
		}
	}
	return nil
}

// bin builds (or finds) p and returns the path of its first binary.
func (b *Builder) bin(ctx context.Context, p Part) (string, error) {
	dir, err := b.Build(ctx, p)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, p.Bins[0]), nil
}

// finish stamps a finished build and moves it into place.
func finish(tmp, out, how string) error {
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"+how+"\n"), 0o644); err != nil {
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

// CoreDNS, Trainer, JobSet, MPIOperator, Kueue and KubeRouter build (or
// find) the component's version and return the path of its binary.
func (b *Builder) CoreDNS(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, coreDNSPart(v))
}

func (b *Builder) Trainer(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, trainerPart(v))
}

func (b *Builder) JobSet(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, jobSetPart(v))
}

func (b *Builder) MPIOperator(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, mpiOperatorPart(v))
}

func (b *Builder) Kueue(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, kueuePart(v))
}

func (b *Builder) KubeRouter(ctx context.Context, v string) (string, error) {
	return b.bin(ctx, kubeRouterPart(v))
}
