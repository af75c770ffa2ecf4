package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Cluster is the single-node Kubernetes of make cluster-up: etcd, the API
// server (RBAC + Node authorization, PodSecurity admission), the
// controller-manager, the scheduler, containerd + runc, a CNI bridge,
// CoreDNS serving cluster.local with no upstream, and the kubelet, started
// in that order and stopped in reverse; then Trainer + JobSet and
// mpi-operator, the podmpi images and the podmpi ClusterTrainingRuntimes.
type Cluster struct {
	L    Layout
	Pins Pins
	B    *Builder
	Log  io.Writer
	// Self is the podmpi-cluster binary (the mount-namespace helper).
	Self string
	pki  *PKI
	// times are the durations of up's steps.
	times stepTimes
	// importMu guards the record of imported images (imports run side by
	// side).
	importMu sync.Mutex
}

// New returns the cluster of this machine (it may or may not run).
func New(repo string, log io.Writer) (*Cluster, error) {
	pins, err := LoadPins()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	l := DefaultLayout(repo)
	return &Cluster{L: l, Pins: pins, B: &Builder{L: l, Log: log, Pins: pins}, Log: log, Self: self, pki: &PKI{Dir: l.PKI()}}, nil
}

func (c *Cluster) logf(format string, a ...any) { fmt.Fprintf(c.Log, format+"\n", a...) }

// Info is what cluster.json records of a running cluster (tests read it).
type Info struct {
	Kubeconfig  string            `json:"kubeconfig"`
	Kubectl     string            `json:"kubectl"`
	Kubernetes  string            `json:"kubernetes"`
	CoreDNS     string            `json:"coredns"`
	Trainer     string            `json:"trainer,omitempty"`
	JobSet      string            `json:"jobset,omitempty"`
	MPIOperator string            `json:"mpiOperator,omitempty"`
	Kueue       string            `json:"kueue,omitempty"`
	KubeRouter  string            `json:"kubeRouter,omitempty"`
	Debian      map[string]string `json:"debian"`
	// Images are the podmpi images the cluster runs, by name (podmpi,
	// openmpi, ...): their references in Registry, which the node pulls.
	Images map[string]string `json:"images,omitempty"`
	// ImageTag is their tag (scripts/version.sh of the work tree); podman
	// has them as localhost/podmpi/<name>:<tag> too.
	ImageTag string `json:"imageTag,omitempty"`
	// Registry is the cluster's OCI registry (host:port, plain http).
	Registry string `json:"registry"`
	// Helm is the helm built for the tests.
	Helm      string  `json:"helm"`
	Node      string  `json:"node"`
	Gateway   string  `json:"gateway"`
	UpSeconds float64 `json:"upSeconds"`
	// Steps are the seconds each step of the last up took (builds ran side
	// by side, so they add up to more than UpSeconds when cold).
	Steps map[string]float64 `json:"steps,omitempty"`
}

// ReadInfo reads cluster.json.
func ReadInfo(l Layout) (Info, error) {
	var i Info
	b, err := os.ReadFile(l.InfoFile())
	if err != nil {
		return i, err
	}
	return i, json.Unmarshal(b, &i)
}

// UpOptions choose the controllers' versions ("" = the pinned default,
// "none" = not installed).
type UpOptions struct {
	Trainer     string
	MPIOperator string
	NoImages    bool // skip building and pushing the podmpi images
	// BuildBehind: the caller builds every pinned binary behind what it
	// runs (podmpi-cluster run --build-behind), helm among them: up does not
	// wait for helm, which only the install test uses.
	BuildBehind bool
}

// Preflight checks that the machine has what the cluster needs.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the cluster needs root (network links, mounts, cgroups); run: sudo make cluster-up")
	}
	var missing []string
	for cmd, pkg := range map[string]string{
		"etcd": "etcd-server", "containerd": "containerd", "ctr": "containerd", "runc": "runc",
		"ip": "iproute2", "podman": "podman", "gcc": "gcc", "go": "Go (https://go.dev/dl/)", "iptables": "iptables",
		"ipset": "ipset",
	} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd+" ("+pkg+")")
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat("/usr/lib/cni/" + plugin); err != nil {
			missing = append(missing, "/usr/lib/cni/"+plugin+" (containernetworking-plugins)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s; scripts/cluster-deps.sh installs them", strings.Join(missing, ", "))
	}
	return nil
}

// Up brings the cluster up, reusing whatever of it already runs. A cluster
// left half-running by a killed run is taken down first.
func (c *Cluster) Up(ctx context.Context, opts UpOptions) (Info, error) {
	start := time.Now()
	if err := Preflight(); err != nil {
		return Info{}, err
	}
	if opts.Trainer == "" {
		opts.Trainer = c.Pins.Trainer[0]
	}
	if opts.MPIOperator == "" {
		opts.MPIOperator = c.Pins.MPIOperator[0]
	}
	core := c.corePlane()
	running := 0
	for _, p := range core {
		if _, ok := p.Running(); ok {
			running++
		}
	}
	if running > 0 && running < len(core) {
		c.logf("== %d of %d cluster daemons run: cleaning up what a killed run left", running, len(core))
		if err := c.Down(ctx); err != nil {
			return Info{}, fmt.Errorf("cleaning up a partial cluster: %w", err)
		}
	} else if running == 0 {
		if _, err := os.Stat(c.L.State); err == nil || len(podNetns()) > 0 || len(cgroupRoots()) > 0 || linkExists(Bridge) {
			c.logf("== leftovers of an earlier cluster found: cleaning up")
			if err := c.Down(ctx); err != nil {
				return Info{}, fmt.Errorf("cleaning up an earlier cluster: %w", err)
			}
		}
	}

	if err := checkDisk(MinUpFree, c.L.State, c.L.Cache, PodmanStorage); err != nil {
		return Info{}, err
	}

	// Every binary and image the run uses, built side by side (cached by
	// version; the images by tag): the control plane starts once Kubernetes
	// and CoreDNS are there, while the rest still builds.
	jobset := ""
	if opts.Trainer != "none" {
		if err := c.Pins.CheckTrainer(opts.Trainer); err != nil {
			return Info{}, err
		}
		v, err := c.B.RequiredVersion(ctx, TrainerModule, opts.Trainer, JobSetModule)
		if err != nil {
			return Info{}, err
		}
		jobset = v
	}
	if opts.MPIOperator != "none" {
		if err := c.Pins.CheckMPIOperator(opts.MPIOperator); err != nil {
			return Info{}, err
		}
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var refs map[string]string
	steps, tag, err := c.upBuilds(ctx, opts, jobset)
	if err != nil {
		return Info{}, err
	}
	b := c.startBuilds(bctx, buildLanes, steps)

	if err := b.wait(ctx, "kubernetes "+c.Pins.Kubernetes, "coredns "+c.Pins.CoreDNS); err != nil {
		return Info{}, err
	}
	for _, d := range []string{c.L.State, c.L.Run, c.L.Logs()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Info{}, err
		}
	}
	if err := c.step("control plane", func() error { return c.startCore(ctx) }); err != nil {
		return Info{}, err
	}

	info := Info{
		Kubeconfig: c.L.AdminKubeconfig(), Kubectl: c.L.Kubectl(c.Pins), Kubernetes: c.Pins.Kubernetes,
		CoreDNS: c.Pins.CoreDNS, Debian: debianVersions(ctx), Node: NodeName, Gateway: Gateway,
		Registry: RegistryAddr(), Helm: c.L.Helm(c.Pins),
	}
	// The controllers are independent of each other (Kueue only wants the
	// job CRDs there first): each starts as soon as its build is done.
	controllers := []func() error{
		func() error {
			return c.step("restricted-v2 admission", func() error { return c.EnsureSCCEmulation(ctx) })
		},
		func() error {
			if err := b.wait(ctx, "kube-router "+c.Pins.KubeRouter); err != nil {
				return err
			}
			return c.step("kube-router", func() error { return c.EnsureKubeRouter(ctx) })
		},
		func() error {
			if opts.Trainer != "none" {
				if err := b.wait(ctx, "trainer "+opts.Trainer, "jobset "+jobset); err != nil {
					return err
				}
				if err := c.step("trainer", func() error { return c.EnsureTrainer(ctx, opts.Trainer) }); err != nil {
					return err
				}
			}
			if opts.MPIOperator != "none" {
				if err := b.wait(ctx, "mpi-operator "+opts.MPIOperator); err != nil {
					return err
				}
				if err := c.step("mpi-operator", func() error { return c.EnsureMPIOperator(ctx, opts.MPIOperator) }); err != nil {
					return err
				}
			}
			if err := b.wait(ctx, "kueue "+c.Pins.Kueue); err != nil {
				return err
			}
			return c.step("kueue", func() error { return c.EnsureKueue(ctx) })
		},
	}
	// The registry (the bridge it listens on is up), then the podmpi
	// images pushed into it as make release pushes them: the node pulls
	// them from there.
	controllers = append(controllers, func() error {
		if err := b.wait(ctx, registryPart(c.Pins.Registry).Key()); err != nil {
			return err
		}
		if err := c.step("registry", func() error { return c.startRegistry(ctx) }); err != nil {
			return err
		}
		if opts.NoImages {
			return nil
		}
		if err := b.wait(ctx, "podmpi images"); err != nil {
			return err
		}
		return c.step("push images", func() error {
			r, err := c.pushImages(ctx, tag)
			refs = r
			return err
		})
	})
	if !opts.BuildBehind {
		controllers = append(controllers, func() error { return b.wait(ctx, helmPart(c.Pins.Helm).Key()) })
	}
	if err := parallel(controllers...); err != nil {
		return Info{}, err
	}
	info.Trainer, info.JobSet, info.MPIOperator = c.InstalledVersion("trainer"), c.InstalledVersion("jobset"), c.InstalledVersion("mpi-operator")
	info.Kueue, info.KubeRouter = c.InstalledVersion("kueue"), c.InstalledVersion("kube-router")
	if !opts.NoImages {
		info.Images, info.ImageTag = refs, tag
		if info.Trainer != "" {
			if err := c.InstallRuntimes(ctx, refs); err != nil {
				return Info{}, err
			}
		}
	}
	if err := c.nodeHealthy(ctx); err != nil {
		return Info{}, err
	}
	info.Steps = c.times.snapshot()
	info.UpSeconds = time.Since(start).Seconds()
	c.logf("== up in %s", time.Since(start).Round(100*time.Millisecond))
	js, _ := json.MarshalIndent(info, "", "  ")
	if err := writeFileAtomic(c.L.InfoFile(), js, 0o644); err != nil {
		return Info{}, err
	}
	return info, nil
}

// debianVersions reads the versions of the Debian-packaged parts.
func debianVersions(ctx context.Context) map[string]string {
	m := map[string]string{}
	for name, pkg := range map[string]string{
		"etcd": "etcd-server", "containerd": "containerd", "runc": "runc", "cni-plugins": "containernetworking-plugins",
		"docker-compose": "docker-compose", "podman": "podman",
	} {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version}", pkg).Output()
		if v := strings.TrimSpace(string(out)); err == nil && v != "" {
			m[name] = v
		} else {
			m[name] = "not installed"
		}
	}
	return m
}

// RuntimeFiles are the podmpi ClusterTrainingRuntimes make cluster-up
// installs (deploy/runtimes), by the MPI of their image (ImageMPIs).
var RuntimeFiles = map[string]string{
	"openmpi":  "deploy/runtimes/clustertrainingruntime-openmpi.yaml",
	"mpich":    "deploy/runtimes/clustertrainingruntime-mpich.yaml",
	"intelmpi": "deploy/runtimes/clustertrainingruntime-intelmpi.yaml",
}

// InstallRuntimes applies the podmpi runtimes of deploy/runtimes with the
// images of this cluster (SetImages).
func (c *Cluster) InstallRuntimes(ctx context.Context, images map[string]string) error {
	var all []*unstructured.Unstructured
	for mpi, f := range RuntimeFiles {
		b, err := os.ReadFile(filepath.Join(c.L.Repo, f))
		if err != nil {
			return err
		}
		objs, err := decodeObjects(b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			SetImages(o, images[mpi], images)
		}
		all = append(all, objs...)
	}
	return c.applyObjects(ctx, all, "podmpi-cluster")
}

// PodmpiInitContainer is the init container of the runtimes and MPIJobs
// that brings podmpi into a pod: launcher install copies /opt/podmpi of its
// image into the emptyDir the other containers mount.
const PodmpiInitContainer = "podmpi"

// SetImages sets the image of every container and init container in an
// object's pod templates (ClusterTrainingRuntime, MPIJob, TrainJob-free
// objects alike) to image, but that of PodmpiInitContainer to images'
// binaries-only image ("podmpi"); on a cluster without that image, to image
// too, which works for podmpi's own images: they hold /opt/podmpi, launcher
// install included.
func SetImages(o *unstructured.Unstructured, image string, images map[string]string) {
	eachContainer(o, func(init bool, c map[string]any) {
		c["image"] = image
		if init && c["name"] == PodmpiInitContainer && images["podmpi"] != "" {
			c["image"] = images["podmpi"]
		}
	})
}

// SetEnv sets an environment variable in every container of an object's
// pod templates (over a value or valueFrom there).
func SetEnv(o *unstructured.Unstructured, name, value string) {
	EachContainer(o, func(c map[string]any) { SetContainerEnv(c, name, value) })
}

// SetContainerEnv sets an environment variable of one container (over a
// value or valueFrom there).
func SetContainerEnv(c map[string]any, name, value string) {
	env, _ := c["env"].([]any)
	for _, x := range env {
		if m, ok := x.(map[string]any); ok && m["name"] == name {
			delete(m, "valueFrom")
			m["value"] = value
			return
		}
	}
	c["env"] = append(env, map[string]any{"name": name, "value": value})
}

// EachContainer calls f with every container and init container anywhere
// in an object.
func EachContainer(o *unstructured.Unstructured, f func(c map[string]any)) {
	eachContainer(o, func(_ bool, c map[string]any) { f(c) })
}

// eachContainer is EachContainer, telling f whether c is an init container.
func eachContainer(o *unstructured.Unstructured, f func(init bool, c map[string]any)) {
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if (k == "containers" || k == "initContainers") && x != nil {
					if list, ok := x.([]any); ok {
						for _, ct := range list {
							if m, ok := ct.(map[string]any); ok {
								f(k == "initContainers", m)
							}
						}
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range t {
				walk(x)
			}
		}
	}
	walk(o.Object)
}

// Down stops every daemon by PID (controllers, kubelet, the containers
// through containerd, containerd and its shims, CoreDNS, the control plane,
// in reverse start order) and removes every mount, network namespace, link,
// iptables rule, cgroup and state folder of the cluster. It works from any
// state, a killed run's included. The cache stays.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	note(c.stopControllers())
	note(c.registryProc().Stop())
	core := c.corePlane()
	byName := map[string]*Process{}
	for _, p := range core {
		byName[p.Name] = p
	}
	note(byName["kubelet"].Stop())
	if _, ok := byName["containerd"].Running(); ok {
		note(c.killContainers(ctx))
	}
	for i := len(core) - 1; i >= 0; i-- {
		if core[i].Name == "kubelet" {
			continue
		}
		note(core[i].Stop())
	}
	// Whatever is left: shims, containers whose containerd died, daemons
	// whose pid file is gone.
	for round := 0; round < 2; round++ {
		for _, pid := range c.L.clusterProcesses() {
			note(stopPID(pid, 5*time.Second))
		}
	}
	note(unmountAll(c.L.State, c.L.Run))
	note(removeNetns())
	note(removeLinks(ctx))
	note(removeRules(ctx))
	note(removeIPSets(ctx))
	note(removeCgroups())
	for _, d := range []string{c.L.State, c.L.Run} {
		if err := os.RemoveAll(d); err != nil {
			note(err)
		}
	}
	// The empty folders a bind mount of Trainer's made on the host (its
	// pod-like service-account folder): removed only when empty, so a host
	// that has its own (a CI runner in a pod) keeps them.
	for d := podServiceAccountDir; d != "/var/run"; d = filepath.Dir(d) {
		_ = os.Remove(d)
	}
	return errors.Join(errs...)
}

// killContainers kills and deletes every container task through
// containerd's socket, so that containerd's shims exit and their mounts go.
func (c *Cluster) killContainers(ctx context.Context) error {
	out, err := c.ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return err
	}
	ids := strings.Fields(out)
	for _, id := range ids {
		_, _ = c.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	}
	var errs []error
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := c.ctr(ctx, "tasks", "delete", id)
			if err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if out, err := c.ctr(ctx, "containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = c.ctr(ctx, "containers", "delete", id)
		}
	}
	return errors.Join(errs...)
}

// buildLanes is how many builds run at once: on 2 cores a third keeps the
// CPU busy while one build downloads modules or links.
const buildLanes = 3

// upBuilds are the builds of up (see partSteps): the shared module's in one
// lane (Kubernetes and CoreDNS first: the control plane waits for them), the
// podmpi images (mostly apt and podman) beside them, and the parts outside
// the shared module in a lane of their own: the registry first (the push
// waits for it), any controller version not in the shared module, helm last
// (only the install test uses it; left to the build behind the tests with
// opts.BuildBehind). It returns the images' tag.
func (c *Cluster) upBuilds(ctx context.Context, opts UpOptions, jobset string) ([]buildStep, string, error) {
	parts := []Part{kubernetesPart(c.Pins.Kubernetes), coreDNSPart(c.Pins.CoreDNS), registryPart(c.Pins.Registry)}
	if opts.Trainer != "none" {
		parts = append(parts, trainerPart(opts.Trainer), jobSetPart(jobset))
	}
	if opts.MPIOperator != "none" {
		parts = append(parts, mpiOperatorPart(opts.MPIOperator))
	}
	parts = append(parts, kueuePart(c.Pins.Kueue), kubeRouterPart(c.Pins.KubeRouter))
	if !opts.BuildBehind {
		parts = append(parts, helmPart(c.Pins.Helm))
	}
	steps, err := c.partSteps(ctx, parts)
	if err != nil || opts.NoImages {
		return steps, "", err
	}
	src, tag, err := c.imageSource(ctx)
	if err != nil {
		return nil, "", err
	}
	images := buildStep{name: "podmpi images", run: func(ctx context.Context) error { return c.buildPodmpiImages(ctx, src, tag) }}
	return append(steps[:1], append([]buildStep{images}, steps[1:]...)...), tag, nil
}

// startCore writes the PKI and configuration and starts the control plane,
// containerd, CoreDNS and the kubelet, then waits for a usable node.
func (c *Cluster) startCore(ctx context.Context) error {
	if err := c.pki.Ensure(certs()); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(); err != nil {
		return err
	}
	toml := filepath.Join(c.L.State, "containerd.toml")
	before, _ := os.ReadFile(toml)
	if err := c.writeConfigs(); err != nil {
		return err
	}
	// A containerd that an older podmpi-cluster started reads another
	// configuration (without the registry's, say): started again with
	// this one. Its containers run on meanwhile.
	if after, _ := os.ReadFile(toml); before != nil && string(after) != string(before) {
		for _, p := range c.corePlane() {
			if _, ok := p.Running(); ok && p.Name == "containerd" {
				c.logf("== %s changed: restarting containerd", toml)
				if err := p.Stop(); err != nil {
					return err
				}
			}
		}
	}
	if err := ensureBridge(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	for _, p := range c.corePlane() {
		if p.Name == "coredns" {
			if _, err := c.Kubectl(ctx, []byte(corednsRBAC), "apply", "--server-side", "--force-conflicts", "--field-manager", "podmpi-cluster", "-f", "-"); err != nil {
				return err
			}
		}
		if p.Name == "kubelet" {
			// The sandbox image must be there before the first pod.
			if err := c.ensurePause(ctx); err != nil {
				return err
			}
		}
		if err := p.Start(ctx); err != nil {
			return err
		}
	}
	if err := c.waitReady(ctx, 90*time.Second); err != nil {
		return err
	}
	c.logf("== node %s Ready, default ServiceAccount there (%s after the first daemon)", NodeName, time.Since(t0).Round(100*time.Millisecond))
	return nil
}
