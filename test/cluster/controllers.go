package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// The controllers run on the host, out of cluster, as their released
// binaries, against the API server, with the RBAC their manifests grant
// their ServiceAccounts (they authenticate with a token of that
// ServiceAccount). Their CRDs, RBAC, webhook configurations and shipped
// runtimes are their own manifests, rendered with kubectl kustomize; only the
// Deployment is left out, and the webhook Service loses its selector and
// gets an Endpoints object at the host address where the controller listens.
// The API server (--enable-aggregator-routing) calls that address, so every
// admission webhook is live, served by the release's own code with the
// certificate its own rotator made.
//
// Why not as Deployments: that needs container images of the controllers
// (built here from source: a Go toolchain image and four more image builds)
// and Service routing to the API server from pods (kube-proxy, iptables
// rules to clean). On the host they start in seconds from cached binaries.

// ctrlDir is a controller's folder: version, rendered manifests, config,
// kubeconfig, log, pid file, and its private /tmp.
func (c *Cluster) ctrlDir(name string) string { return filepath.Join(c.L.Controllers(), name) }

// InstalledVersion is the version of a controller this cluster runs ("" if
// none).
func (c *Cluster) InstalledVersion(name string) string {
	b, err := os.ReadFile(filepath.Join(c.ctrlDir(name), "version"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (c *Cluster) setVersion(name, v string) error {
	return os.WriteFile(filepath.Join(c.ctrlDir(name), "version"), []byte(v+"\n"), 0o644)
}

// controllerProc is the Process of a controller; certSecret, when set, is
// the Secret its certificate rotator fills ("ns/name"), copied into its
// private /tmp/k8s-webhook-server/serving-certs.
func (c *Cluster) controllerProc(name, bin string, args []string, readyz string, certSecret string) *Process {
	dir := c.ctrlDir(name)
	p := c.proc(name, bin, args, nil, 3*time.Minute)
	p.Dir = dir
	ready := c.httpHealth(readyz, false)
	if certSecret == "" {
		p.Health = ready
		return p
	}
	// Trainer and JobSet hard-code the folder their webhook server reads
	// and their rotator waits on; in a pod the kubelet mounts the Secret
	// there. Here the process gets a /tmp of its own (bind mount in its
	// own mount namespace) and the Secret is copied in when filled.
	tmp := filepath.Join(dir, "tmp")
	p.Binds = []Bind{{Source: tmp, Target: "/tmp"}}
	ns, secret, _ := strings.Cut(certSecret, "/")
	certDir := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	p.Health = func(ctx context.Context) error {
		if err := c.syncWebhookCerts(ctx, ns, secret, certDir); err != nil {
			return err
		}
		return ready(ctx)
	}
	return p
}

// syncWebhookCerts copies tls.crt and tls.key from the rotator's Secret into
// dir once the rotator has written them.
func (c *Cluster) syncWebhookCerts(ctx context.Context, ns, name, dir string) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("webhook certificate Secret %s/%s: %w", ns, name, err)
	}
	crt, key := s.Data["tls.crt"], s.Data["tls.key"]
	if len(crt) == 0 || len(key) == 0 {
		return fmt.Errorf("webhook certificate Secret %s/%s not filled by the controller's rotator yet", ns, name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for f, data := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": s.Data["ca.crt"]} {
		if old, err := os.ReadFile(filepath.Join(dir, f)); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := writeFileAtomic(filepath.Join(dir, f), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// exposeOnHost turns the named Service into one without selector and adds
// an Endpoints object at the gateway: ports maps each Service port name to
// the host port the controller listens on.
func exposeOnHost(objs []*unstructured.Unstructured, ns, svc string, ports map[string]int) ([]*unstructured.Unstructured, error) {
	found := false
	for _, o := range objs {
		if o.GetKind() != "Service" || o.GetName() != svc || o.GetNamespace() != ns {
			continue
		}
		found = true
		unstructured.RemoveNestedField(o.Object, "spec", "selector")
		sp, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		var eps []any
		for _, p := range sp {
			pm, _ := p.(map[string]any)
			name, _ := pm["name"].(string)
			hp, ok := ports[name]
			if !ok {
				continue
			}
			ep := map[string]any{"port": int64(hp), "protocol": "TCP"}
			if name != "" {
				ep["name"] = name
			}
			eps = append(eps, ep)
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("the Service %s/%s: none of its ports is named %v", ns, svc, ports)
		}
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Endpoints",
			"metadata": map[string]any{"name": svc, "namespace": ns, "labels": map[string]any{"podmpi.io/out-of-cluster": "true"}},
			"subsets": []any{map[string]any{
				"addresses": []any{map[string]any{"ip": Gateway}},
				"ports":     eps,
			}},
		}})
	}
	if !found {
		return nil, fmt.Errorf("no Service %s/%s in the rendered manifests", ns, svc)
	}
	return objs, nil
}

// withoutDeployments drops the Deployments (the controllers run on the
// host) and returns the ServiceAccount each would have run as.
func withoutDeployments(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, map[string]string) {
	var out []*unstructured.Unstructured
	sas := map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
			sas[o.GetName()] = o.GetNamespace() + "/" + sa
			continue
		}
		out = append(out, o)
	}
	return out, sas
}

func (c *Cluster) render(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	out, err := c.Kubectl(ctx, nil, "kustomize", dir)
	if err != nil {
		return nil, err
	}
	return decodeObjects([]byte(out))
}

func (c *Cluster) saveRendered(name string, objs []*unstructured.Unstructured) error {
	b, err := encodeObjects(objs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.ctrlDir(name), "rendered.yaml"), b, 0o644)
}

// hostWebhook names the webhook Service of a controller's manifests and the
// host port behind each of its port names (see exposeOnHost).
type hostWebhook struct {
	ns, svc string
	ports   map[string]int
}

// installRendered installs a controller's rendered manifests without their
// Deployments: the webhook Service (when hook is set) points at the host,
// the objects are saved and applied (CRDs first, established), and the
// controller gets a kubeconfig of the ServiceAccount its Deployment deploy
// would have run as.
func (c *Cluster) installRendered(ctx context.Context, name string, objs []*unstructured.Unstructured, hook *hostWebhook, deploy string) error {
	objs, sas := withoutDeployments(objs)
	if hook != nil {
		var err error
		if objs, err = exposeOnHost(objs, hook.ns, hook.svc, hook.ports); err != nil {
			return err
		}
	}
	if err := c.saveRendered(name, objs); err != nil {
		return err
	}
	if err := c.applyObjects(ctx, objs, "podmpi-cluster"); err != nil {
		return err
	}
	ns, sa, _ := strings.Cut(sas[deploy], "/")
	return c.serviceAccountKubeconfig(ctx, filepath.Join(c.ctrlDir(name), "kubeconfig"), ns, sa)
}

// uninstall stops a controller and deletes what its manifests created
// (CRDs with their objects, webhook configurations, RBAC, namespace).
func (c *Cluster) uninstall(ctx context.Context, name string) error {
	dir := c.ctrlDir(name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c.logf("== removing %s %s", name, c.InstalledVersion(name))
	p := &Process{Name: name, Dir: dir, StopTimeout: 15 * time.Second}
	var errs []error
	// Webhook configurations first: with the controller gone they would
	// refuse every object they select.
	if b, err := os.ReadFile(filepath.Join(dir, "rendered.yaml")); err == nil {
		objs, err := decodeObjects(b)
		if err == nil {
			var hooks, rest []*unstructured.Unstructured
			for _, o := range objs {
				if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
					hooks = append(hooks, o)
				} else {
					rest = append(rest, o)
				}
			}
			// The custom resources next, while the controller still runs
			// to handle their finalizers; whatever still holds a finalizer
			// after that is released, so that the CRDs can go.
			if err := c.deleteCustomResources(ctx, rest); err != nil {
				errs = append(errs, err)
			}
			for _, set := range [][]*unstructured.Unstructured{hooks, rest} {
				if len(set) == 0 {
					continue
				}
				eb, _ := encodeObjects(set)
				if _, err := c.Kubectl(ctx, eb, "delete", "--ignore-not-found", "--wait=true", "--timeout=180s", "-f", "-"); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := p.Stop(); err != nil {
		errs = append(errs, err)
	}
	_ = unmountAll(dir)
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// EnsureTrainer makes the cluster run Trainer v with the JobSet its go.mod
// names, replacing another version if one runs.
func (c *Cluster) EnsureTrainer(ctx context.Context, v string) error {
	if err := c.Pins.CheckTrainer(v); err != nil {
		return err
	}
	jsv, err := c.B.RequiredVersion(ctx, TrainerModule, v, JobSetModule)
	if err != nil {
		return err
	}
	if !contains(c.Pins.JobSet, jsv) {
		return fmt.Errorf("Trainer %s requires JobSet %s (its go.mod), which test/cluster/versions.txt does not pin", v, jsv)
	}
	if c.InstalledVersion("trainer") != v || c.InstalledVersion("jobset") != jsv {
		// Trainer first: its TrainJobs own JobSets.
		if err := c.uninstall(ctx, "trainer"); err != nil {
			return err
		}
		if err := c.uninstall(ctx, "jobset"); err != nil {
			return err
		}
	}
	if err := c.installJobSet(ctx, jsv); err != nil {
		return err
	}
	return c.installTrainer(ctx, v)
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

const (
	jobsetNS  = "jobset-system"
	trainerNS = "kubeflow-system"
	mpiOpNS   = "mpi-operator"
)

func (c *Cluster) installJobSet(ctx context.Context, v string) error {
	bin, err := c.B.JobSet(ctx, v)
	if err != nil {
		return err
	}
	dir := c.ctrlDir("jobset")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return err
	}
	fresh := c.InstalledVersion("jobset") != v
	if fresh {
		mod, err := c.B.ModuleDir(ctx, JobSetModule, v)
		if err != nil {
			return err
		}
		objs, err := c.render(ctx, filepath.Join(mod, "config", "default"))
		if err != nil {
			return err
		}
		hook := &hostWebhook{jobsetNS, "jobset-webhook-service", map[string]int{"": JobSetWebhookPort, "webhook": JobSetWebhookPort, "webhook-server": JobSetWebhookPort}}
		if err := c.installRendered(ctx, "jobset", objs, hook, "jobset-controller-manager"); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: jobset-webhook-service
  webhookSecretName: jobset-webhook-server-cert
webhook:
  port: %d
  host: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
`, JobSetWebhookPort, Gateway, JobSetHealthPort, JobSetMetricsPort)
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	p := c.controllerProc("jobset", bin, []string{
		"--config", filepath.Join(dir, "config.yaml"),
		"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--zap-log-level=2",
	}, fmt.Sprintf("http://127.0.0.1:%d/readyz", JobSetHealthPort), jobsetNS+"/jobset-webhook-server-cert")
	c.logf("== JobSet %s", v)
	if err := p.Start(ctx); err != nil {
		return err
	}
	if err := c.waitWebhook(ctx, "JobSet", jobsetProbe); err != nil {
		return err
	}
	return c.setVersion("jobset", v)
}

const jobsetProbe = `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: podmpi-webhook-probe
  namespace: default
spec:
  replicatedJobs:
  - name: probe
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: probe
              image: podmpi.local/none:0
`

// trainerProbe asks the validating webhook about a runtime; any answer from
// the webhook (even a refusal) proves it is live.
const trainerProbe = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: podmpi-webhook-probe
spec:
  mlPolicy:
    numNodes: 1
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                restartPolicy: Never
                containers:
                - name: node
                  image: podmpi.local/none:0
`

// waitWebhook creates obj with a server-side dry run until the API server
// reaches the controller's webhook (an admission answer either way).
func (c *Cluster) waitWebhook(ctx context.Context, what, obj string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := c.Kubectl(ctx, []byte(obj), "create", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			if err != nil && !strings.Contains(err.Error(), "denied the request") {
				return fmt.Errorf("%s webhook probe: %w", what, err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s webhooks not reachable through the API server after 90 s: %w", what, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (c *Cluster) installTrainer(ctx context.Context, v string) error {
	bin, err := c.B.Trainer(ctx, v)
	if err != nil {
		return err
	}
	dir := c.ctrlDir("trainer")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return err
	}
	newConfig := !TrainerConfigFlags(v)
	// status: the release has the TrainJob status API (v2.2 and later),
	// which this cluster turns on (TrainerStatus).
	status := TrainerStatus(v)
	fresh := c.InstalledVersion("trainer") != v
	mod, err := c.B.ModuleDir(ctx, TrainerModule, v)
	if err != nil {
		return err
	}
	manifests := filepath.Join(dir, "manifests")
	if fresh {
		// Upstream's manager overlay, with its JobSet line taken out as its
		// own comment says to when JobSet is installed separately.
		_ = os.RemoveAll(manifests)
		if err := copyTree(filepath.Join(mod, "manifests"), manifests); err != nil {
			return err
		}
		kf := filepath.Join(manifests, "overlays", "manager", "kustomization.yaml")
		k, err := os.ReadFile(kf)
		if err != nil {
			return err
		}
		var lines []string
		for _, l := range strings.Split(string(k), "\n") {
			if !strings.Contains(l, "third-party/jobset") {
				lines = append(lines, l)
			}
		}
		if err := os.WriteFile(kf, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			return err
		}
		objs, err := c.render(ctx, filepath.Join(manifests, "overlays", "manager"))
		if err != nil {
			return err
		}
		ports := map[string]int{"webhook-server": TrainerWebhookPort, "monitoring-port": TrainerMetricsPort, "status-server": TrainerStatusPort}
		hook := &hostWebhook{trainerNS, "kubeflow-trainer-controller-manager", ports}
		if err := c.installRendered(ctx, "trainer", objs, hook, "kubeflow-trainer-controller-manager"); err != nil {
			return err
		}
	}
	if newConfig {
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(trainerConfig(v)), 0o644); err != nil {
			return err
		}
	}
	args := []string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--zap-log-level=2"}
	if newConfig {
		args = append(args, "--config", filepath.Join(dir, "config.yaml"))
	} else {
		// v2.0.0 always rotates its certificate and, with leader election,
		// fails out of cluster for want of a lock ID: keep it off.
		args = append(args,
			"--webhook-server-port", strconv.Itoa(TrainerWebhookPort),
			"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", TrainerHealthPort),
			"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", TrainerMetricsPort),
			"--metrics-secure=false",
			"--leader-elect=false")
	}
	p := c.controllerProc("trainer", bin, args, fmt.Sprintf("http://127.0.0.1:%d/readyz", TrainerHealthPort), trainerNS+"/kubeflow-trainer-webhook-cert")
	if status {
		if _, err := os.Stat(filepath.Join(dir, ServiceAccountDir, "token")); err != nil {
			// Installed before the files were written beside the
			// kubeconfig: write them (and the kubeconfig) anew.
			if err := c.serviceAccountKubeconfig(ctx, filepath.Join(dir, "kubeconfig"), trainerNS, "kubeflow-trainer-controller-manager"); err != nil {
				return err
			}
		}
		binds, err := c.statusServerBinds(dir)
		if err != nil {
			return err
		}
		if err := ensureRule(ctx, issuerRule); err != nil {
			return fmt.Errorf("routing the token issuer's URL to the API server: %w", err)
		}
		p.Binds = append(p.Binds, binds...)
	}
	c.logf("== Trainer %s", v)
	if err := p.Start(ctx); err != nil {
		return err
	}
	if err := c.waitWebhook(ctx, "Trainer", trainerProbe); err != nil {
		return err
	}
	if status {
		if err := c.routeTrainerStatus(ctx); err != nil {
			return err
		}
	}
	if fresh {
		// Upstream's shipped runtimes go through Trainer's own webhook.
		objs, err := c.render(ctx, filepath.Join(manifests, "overlays", "runtimes"))
		if err != nil {
			return err
		}
		if err := c.applyObjects(ctx, objs, "podmpi-cluster"); err != nil {
			return fmt.Errorf("Trainer %s shipped runtimes: %w", v, err)
		}
	}
	return c.setVersion("trainer", v)
}

// TrainerStatus reports whether Trainer release v has the TrainJob status
// API (feature gate TrainJobStatus, v2.2 and later), which this cluster
// turns on.
func TrainerStatus(v string) bool {
	m, err := strconv.Atoi(Minor(v))
	return err == nil && m >= 2
}

// statusServerBinds are what Trainer's status server needs out of cluster:
// it learns the cluster's token issuer from the token a pod would have
// mounted (/var/run/secrets/kubernetes.io/serviceaccount, the files
// serviceAccountKubeconfig writes beside its kubeconfig), then fetches the
// issuer's OIDC discovery document from its URL, here
// https://kubernetes.default.svc.<domain>, which a hosts file of its own
// points at the gateway, where issuerRule sends port 443 to the API server.
func (c *Cluster) statusServerBinds(dir string) ([]Bind, error) {
	hosts := filepath.Join(dir, "hosts")
	text := fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s kubernetes.default.svc.%s kubernetes.default.svc kubernetes.default kubernetes\n",
		Gateway, ClusterDomain)
	if err := os.WriteFile(hosts, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return []Bind{{Source: filepath.Join(dir, secretsDir), Target: podSecretsDir}, {Source: hosts, Target: "/etc/hosts"}}, nil
}

// routeTrainerStatus makes the status endpoint Trainer gives the pods
// (https://<its Service>.<namespace>.svc:10443) reach it on the host, as
// kube-proxy would: the Service's cluster address and port to the
// gateway's TrainerStatusPort.
func (c *Cluster) routeTrainerStatus(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	svc, err := cs.CoreV1().Services(trainerNS).Get(ctx, "kubeflow-trainer-controller-manager", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the Trainer controller's Service: %w", err)
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Name == "status-server" && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != "None" {
			return ensureRule(ctx, serviceRule(svc.Spec.ClusterIP, int(sp.Port), TrainerStatusPort, "Trainer's status endpoint"))
		}
	}
	return fmt.Errorf("the Trainer controller's Service %s/%s has no status-server port with a cluster address", trainerNS, svc.Name)
}

// EnsureMPIOperator makes the cluster run mpi-operator v, replacing another
// version if one runs.
func (c *Cluster) EnsureMPIOperator(ctx context.Context, v string) error {
	if err := c.Pins.CheckMPIOperator(v); err != nil {
		return err
	}
	if c.InstalledVersion("mpi-operator") != v {
		if err := c.uninstall(ctx, "mpi-operator"); err != nil {
			return err
		}
	}
	bin, err := c.B.MPIOperator(ctx, v)
	if err != nil {
		return err
	}
	dir := c.ctrlDir("mpi-operator")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.InstalledVersion("mpi-operator") != v {
		mod, err := c.B.ModuleDir(ctx, MPIOperatorModule, v)
		if err != nil {
			return err
		}
		objs, err := c.render(ctx, filepath.Join(mod, "manifests", "overlays", "standalone"))
		if err != nil {
			return err
		}
		// The CRD must be established before the operator starts (it
		// exits with "CRD doesn't exist" otherwise); applyObjects waits.
		if err := c.installRendered(ctx, "mpi-operator", objs, nil, "mpi-operator"); err != nil {
			return err
		}
	}
	args := []string{
		"--kubeConfig", filepath.Join(dir, "kubeconfig"),
		"--lock-namespace", mpiOpNS,
		"--monitoring-port", strconv.Itoa(MPIOperatorPort),
		"-alsologtostderr",
	}
	// Its health endpoint is on :8080, fixed in its code.
	p := c.controllerProc("mpi-operator", bin, args, "http://127.0.0.1:8080/healthz", "")
	c.logf("== mpi-operator %s", v)
	if err := p.Start(ctx); err != nil {
		return err
	}
	return c.setVersion("mpi-operator", v)
}

// copyTree copies a folder (regular files and folders), writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// stopControllers stops every controller process (keeping what they
// installed), for down.
func (c *Cluster) stopControllers() error {
	var errs []error
	for _, n := range []string{"kueue", "trainer", "jobset", "mpi-operator", "kube-router"} {
		p := &Process{Name: n, Dir: c.ctrlDir(n), StopTimeout: 10 * time.Second}
		if err := p.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteCustomResources deletes every object of the CRDs among objs (all
// namespaces), waits up to 60 s for them to go, then removes the
// finalizers of those still there.
func (c *Cluster) deleteCustomResources(ctx context.Context, objs []*unstructured.Unstructured) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.L.AdminKubeconfig())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var gvrs []schema.GroupVersionResource
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			m, _ := v.(map[string]any)
			if storage, _ := m["storage"].(bool); storage {
				name, _ := m["name"].(string)
				gvrs = append(gvrs, schema.GroupVersionResource{Group: group, Version: name, Resource: plural})
			}
		}
	}
	left := func() []unstructured.Unstructured {
		var out []unstructured.Unstructured
		for _, gvr := range gvrs {
			l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err == nil {
				out = append(out, l.Items...)
			}
		}
		return out
	}
	for _, gvr := range gvrs {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue // the CRD is not there (any more)
		}
		for _, it := range l.Items {
			_ = dyn.Resource(gvr).Namespace(it.GetNamespace()).Delete(ctx, it.GetName(), metav1.DeleteOptions{})
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(left()) > 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	var errs []error
	for _, gvr := range gvrs {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, it := range l.Items {
			if len(it.GetFinalizers()) == 0 {
				continue
			}
			c.logf("== %s %s/%s still has finalizers %v after 60 s: removing them", gvr.Resource, it.GetNamespace(), it.GetName(), it.GetFinalizers())
			_, err := dyn.Resource(gvr).Namespace(it.GetNamespace()).Patch(ctx, it.GetName(), types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
