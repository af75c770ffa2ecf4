package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every plugin the cluster's Corefile names is built into CoreDNS: a
// directive without its plugin makes CoreDNS refuse the Corefile.
func TestCorefilePluginsBuiltIn(t *testing.T) {
	pkg := map[string]string{"prometheus": "metrics"}
	var used []string
	for _, line := range strings.Split(corefile("/k"), "\n") {
		f := strings.Fields(line)
		// A directive is the first word of a line indented by four spaces.
		if len(f) == 0 || !strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "     ") || f[0] == "}" {
			continue
		}
		name := f[0]
		if p, ok := pkg[name]; ok {
			name = p
		}
		used = append(used, name)
		if !slices.Contains(coreDNSPlugins, name) {
			t.Errorf("the Corefile uses %q, which the CoreDNS build leaves out (coreDNSPlugins: %v)", f[0], coreDNSPlugins)
		}
	}
	if len(used) < 5 || !slices.Contains(used, "kubernetes") {
		t.Fatalf("found directives %v in the Corefile: the parser above is wrong", used)
	}
}

func TestSharedModuleFiles(t *testing.T) {
	parts := []Part{kubernetesPart("v1.36.3"), coreDNSPart("v1.14.2"), trainerPart("v2.3.0"), jobSetPart("v0.12.0")}
	files := sharedModuleFiles(parts, []string{"k8s.io/api => k8s.io/api v0.36.3"}, []string{"golang.org/x/net v0.60.0"})
	mod := files["go.mod"]
	for _, want := range []string{"module " + sharedModule, "\tk8s.io/kubernetes v1.36.3\n", "\tgithub.com/coredns/coredns v1.14.2\n",
		"\tgithub.com/kubeflow/trainer/v2 v2.3.0\n", "\tsigs.k8s.io/jobset v0.12.0\n", "\tgolang.org/x/net v0.60.0\n", "replace (\n\tk8s.io/api => k8s.io/api v0.36.3\n)"} {
		if !strings.Contains(mod, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, mod)
		}
	}
	tools := files["tools.go"]
	for _, want := range []string{`_ "k8s.io/kubernetes/cmd/kubelet"`, `_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"`, `_ "sigs.k8s.io/jobset"`} {
		if !strings.Contains(tools, want) {
			t.Errorf("tools.go lacks %s:\n%s", want, tools)
		}
	}
	if strings.Contains(tools, sharedModule) {
		t.Errorf("tools.go imports the module's own package:\n%s", tools)
	}
	dns := files["coredns/main.go"]
	if strings.Contains(dns, "core/plugin") {
		t.Errorf("CoreDNS's main imports the default plugin set:\n%s", dns)
	}
	for _, pl := range coreDNSPlugins {
		if !strings.Contains(dns, `"github.com/coredns/coredns/plugin/`+pl+`"`) {
			t.Errorf("CoreDNS's main lacks plugin %s", pl)
		}
	}
}

// The shared parts are Kubernetes, CoreDNS and every controller's default;
// another version is built as released, and a Kubernetes or CoreDNS the pins
// do not name is refused rather than built some other way.
func TestSharedParts(t *testing.T) {
	pins, err := LoadPins()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := &Builder{L: Layout{Cache: dir}, Pins: pins}
	b.shared = []Part{kubernetesPart(pins.Kubernetes), coreDNSPart(pins.CoreDNS), trainerPart(pins.Trainer[0]), jobSetPart(pins.JobSet[0]),
		mpiOperatorPart(pins.MPIOperator[0]), kueuePart(pins.Kueue), kubeRouterPart(pins.KubeRouter)}
	c := &Cluster{B: b, Pins: pins}
	parts := []Part{kubernetesPart(pins.Kubernetes), coreDNSPart(pins.CoreDNS), trainerPart(pins.Trainer[1]), mpiOperatorPart(pins.MPIOperator[0]),
		jobSetPart(pins.JobSet[1])}
	steps, err := c.partSteps(context.Background(), parts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		names := []string{s.name}
		for _, n := range s.then {
			names = append(names, n.name)
		}
		got = append(got, strings.Join(names, " -> "))
	}
	want := []string{
		"kubernetes " + pins.Kubernetes + " + coredns " + pins.CoreDNS + " -> mpi-operator " + pins.MPIOperator[0],
		"trainer " + pins.Trainer[1] + " -> jobset " + pins.JobSet[1],
	}
	if p := steps[0].names(); !slices.Equal(p, []string{"kubernetes " + pins.Kubernetes, "coredns " + pins.CoreDNS}) {
		t.Errorf("the first step is waited for by %q, want each part's name", p)
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	if _, err := b.Build(context.Background(), kubernetesPart("v1.30.0")); err == nil || !strings.Contains(err.Error(), "not the pinned version") {
		t.Errorf("Build of an unpinned Kubernetes = %v, want it refused", err)
	}
	// A complete build in the cache is found without building.
	p := trainerPart(pins.Trainer[0])
	out := b.Dir(p)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	id := sharedID(b.shared)
	if err := os.WriteFile(filepath.Join(out, p.Bins[0]), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, stampFile), []byte("2026-11-26T00:00:00Z\nreleased\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cached(out, id, p.Bins...) || !cached(out, "", p.Bins...) {
		t.Error("a part built as released counts as built in the shared module, or not as built at all")
	}
	if err := os.WriteFile(filepath.Join(out, stampFile), []byte("2026-11-26T00:00:00Z\n"+id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bin, err := b.Trainer(context.Background(), pins.Trainer[0]); err != nil || bin != filepath.Join(out, p.Bins[0]) {
		t.Errorf("Trainer = %q, %v; want the cached %s", bin, err, filepath.Join(out, p.Bins[0]))
	}
}

// A chained step's parts run one after the other, each waited for by its
// own name, beside the other lanes.
func TestBuildChain(t *testing.T) {
	c := &Cluster{Log: &lockedWriter{}}
	var mu = make(chan struct{}, 1)
	var order []string
	rec := func(name string, err error) buildStep {
		return buildStep{name: name, run: func(context.Context) error {
			select {
			case mu <- struct{}{}:
			default:
				t.Errorf("%s ran while another part of the chain ran", name)
			}
			order = append(order, name)
			<-mu
			return err
		}}
	}
	first := rec("k8s", nil)
	first.provides = []string{"k8s", "coredns"}
	first.then = []buildStep{rec("dns", os.ErrNotExist), rec("ctl", nil)}
	other := buildStep{name: "images", run: func(context.Context) error { return nil }}
	b := c.startBuilds(context.Background(), 2, []buildStep{first, other})
	if err := b.wait(context.Background(), "ctl", "k8s", "coredns", "images"); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(context.Background(), "dns"); err == nil {
		t.Error("the failed link of the chain: want its error")
	}
	if !slices.Equal(order, []string{"k8s", "dns", "ctl"}) {
		t.Errorf("chain ran %v", order)
	}
}

func TestUnaligned(t *testing.T) {
	gomod := "module m\n\nrequire golang.org/x/net v0.60.0\n\nrequire (\n\tk8s.io/api v0.36.3 // indirect\n\tgolang.org/x/sys v0.49.0\n)\n\nreplace k8s.io/api => k8s.io/api v0.36.3\n"
	got := unaligned([]string{"golang.org/x/net v0.60.0", "k8s.io/api v0.36.2", "golang.org/x/sys v0.49.0", "github.com/x/y v1.0.0"}, gomod)
	if !slices.Equal(got, []string{"k8s.io/api@v0.36.3"}) {
		t.Errorf("unaligned = %v, want only k8s.io/api@v0.36.3", got)
	}
}

// Two builders of one part, as a build behind the tests and a test's own
// `podmpi-cluster controllers` are: the second waits until the first lets
// go, and a cancelled wait ends at once.
func TestBuildLock(t *testing.T) {
	var log strings.Builder
	b := &Builder{L: Layout{Cache: t.TempDir()}, Log: &log}
	ctx := context.Background()
	unlock, err := b.lock(ctx, "mpi-operator v0.6.0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		u, err := b.lock(ctx, "mpi-operator v0.6.0") // another open file: flock conflicts as across processes
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
		u()
	}()
	time.Sleep(700 * time.Millisecond)
	released := time.Now()
	unlock()
	select {
	case at := <-got:
		if at.Before(released) {
			t.Fatalf("the second holder got the lock while the first held it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second holder never got the lock after it was let go")
	}
	if !strings.Contains(log.String(), "waiting for it") || !strings.Contains(log.String(), "the other build ended") {
		t.Errorf("the wait was not logged:\n%s", log.String())
	}
	// Another part's lock is its own.
	u2, err := b.lock(ctx, "trainer v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	defer u2()
	unlock, err = b.lock(ctx, "mpi-operator v0.6.0")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.lock(cctx, "trainer v2.0.0"); err == nil {
		t.Fatal("a second lock of a held part while the context ended: no error")
	}
}

// Cancelling a go command stops its whole process group: go run's child
// (the program it built) ends with it, and nothing of it is left.
func TestCommandCancelStopsTheGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go")
	}
	dir := t.TempDir()
	marker := "podmpi-cancel-" + filepath.Base(dir)
	prog := "package main\n\nimport (\n\t\"os\"\n\t\"time\"\n)\n\nfunc main() {\n\tos.WriteFile(os.Args[1], nil, 0o644)\n\ttime.Sleep(2 * time.Minute)\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(dir, marker)
	ctx, cancel := context.WithCancel(context.Background())
	b := &Builder{Nice: true}
	cmd := b.command(ctx, "run", filepath.Join(dir, "main.go"), started)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			_ = cmd.Wait()
			t.Fatal("the program go run built never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	pgid := cmd.Process.Pid
	start := time.Now()
	cancel()
	_ = cmd.Wait()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the cancelled command took %s to end", d)
	}
	// The group's members are gone (zombies of init aside, none runs).
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(-pgid, 0); err == nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("process group %d still has members after the cancel", pgid)
	}
}
