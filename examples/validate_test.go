package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// crdDir holds the upstream CRDs the manifests are validated against, one
// directory per operator release (trainer-v2.3.0, mpi-operator-v0.8.2, ...),
// each file copied unchanged from that release's manifests/base.
const crdDir = "testdata/crds"

// coreKinds are the built-in kinds the examples may use, each decoded
// strictly into its k8s.io/api type.
var coreKinds = map[gvk]func() any{
	{"v1", "ConfigMap"}:                                    func() any { return new(corev1.ConfigMap) },
	{"v1", "Secret"}:                                       func() any { return new(corev1.Secret) },
	{"v1", "Service"}:                                      func() any { return new(corev1.Service) },
	{"v1", "ServiceAccount"}:                               func() any { return new(corev1.ServiceAccount) },
	{"v1", "Pod"}:                                          func() any { return new(corev1.Pod) },
	{"batch/v1", "Job"}:                                    func() any { return new(batchv1.Job) },
	{"networking.k8s.io/v1", "NetworkPolicy"}:              func() any { return new(networkingv1.NetworkPolicy) },
	{"rbac.authorization.k8s.io/v1", "Role"}:               func() any { return new(rbacv1.Role) },
	{"rbac.authorization.k8s.io/v1", "RoleBinding"}:        func() any { return new(rbacv1.RoleBinding) },
	{"rbac.authorization.k8s.io/v1", "ClusterRole"}:        func() any { return new(rbacv1.ClusterRole) },
	{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"}: func() any { return new(rbacv1.ClusterRoleBinding) },
}

// document is one YAML document of a manifest file.
type document struct {
	File  string // relative to examples/
	Index int    // 0-based position in the file
	Raw   []byte // YAML
	Obj   map[string]any
	GVK   gvk
	Name  string
}

func (d document) String() string {
	return fmt.Sprintf("%s#%d (%s %q)", d.File, d.Index, d.GVK, d.Name)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitYAML splits a multi-document YAML stream on "---" lines and drops
// documents that hold only comments or whitespace.
func splitYAML(b []byte) [][]byte {
	var out [][]byte
	for _, part := range docSeparator.Split(string(b), -1) {
		empty := true
		for _, line := range strings.Split(part, "\n") {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			out = append(out, []byte(part))
		}
	}
	return out
}

// parseDocument decodes one YAML document into a generic object and its kind.
func parseDocument(file string, i int, raw []byte) (document, error) {
	d := document{File: file, Index: i, Raw: raw}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return d, fmt.Errorf("%s#%d: YAML: %w", file, i, err)
	}
	v, err := decodeJSON(js)
	if err != nil {
		return d, fmt.Errorf("%s#%d: %w", file, i, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return d, fmt.Errorf("%s#%d: want a YAML mapping (a Kubernetes object), got %s", file, i, describe(v))
	}
	d.Obj = obj
	d.GVK.APIVersion, _ = obj["apiVersion"].(string)
	d.GVK.Kind, _ = obj["kind"].(string)
	if d.GVK.APIVersion == "" || d.GVK.Kind == "" {
		return d, fmt.Errorf("%s#%d: apiVersion and kind are required", file, i)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		d.Name, _ = md["name"].(string)
	}
	return d, nil
}

// strictYAML decodes YAML into a typed object the way the API server does
// (sigs.k8s.io/json: case-sensitive field names), failing on unknown,
// duplicate or wrongly typed fields: what kubectl's default
// --validate=strict rejects. encoding/json alone would accept
// "readOnlyRootFileSystem" for readOnlyRootFilesystem.
func strictYAML(raw []byte, into any) error {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// validateMetadata checks the root metadata as the API server does for
// every kind: an ObjectMeta with a DNS-subdomain name.
func validateMetadata(d document) []string {
	md, ok := d.Obj["metadata"]
	if !ok {
		return []string{"metadata: required field missing"}
	}
	raw, err := yaml.Marshal(md)
	if err != nil {
		return []string{"metadata: " + err.Error()}
	}
	var om metav1.ObjectMeta
	if err := strictYAML(raw, &om); err != nil {
		return []string{"metadata: " + err.Error()}
	}
	var errs []string
	if om.Name == "" {
		errs = append(errs, "metadata.name: required")
	}
	for _, m := range validation.IsDNS1123Subdomain(om.Name) {
		errs = append(errs, "metadata.name: "+m)
	}
	for k, v := range om.Labels {
		for _, m := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Sprintf("metadata.labels[%q]: %s", k, m))
		}
		for _, m := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Sprintf("metadata.labels[%q]: %s", k, m))
		}
	}
	return errs
}

// podTemplate is a pod template found inside a manifest.
type podTemplate struct {
	Path string // JSON path in the manifest
	Role string // "launcher", "worker" or "" when unknown
	Spec corev1.PodTemplateSpec
}

// podTemplates extracts and strictly decodes every pod template of d.
func podTemplates(d document) ([]podTemplate, []string) {
	type found struct {
		path, role string
		v          any
	}
	var raw []found
	switch d.GVK {
	case gvk{"trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"}, gvk{"trainer.kubeflow.org/v1alpha1", "TrainingRuntime"}:
		rjs, _ := dig(d.Obj, "spec", "template", "spec", "replicatedJobs").([]any)
		for i, rj := range rjs {
			m, _ := rj.(map[string]any)
			name, _ := m["name"].(string)
			role := map[string]string{"node": "worker", "launcher": "launcher"}[name]
			raw = append(raw, found{fmt.Sprintf("spec.template.spec.replicatedJobs[%d].template.spec.template", i), role,
				dig(m, "template", "spec", "template")})
		}
	case gvk{"kubeflow.org/v2beta1", "MPIJob"}:
		specs, _ := dig(d.Obj, "spec", "mpiReplicaSpecs").(map[string]any)
		for _, name := range sortedKeys(specs) {
			m, _ := specs[name].(map[string]any)
			raw = append(raw, found{"spec.mpiReplicaSpecs." + name + ".template", strings.ToLower(name), dig(m, "template")})
		}
	case gvk{"batch/v1", "Job"}:
		raw = append(raw, found{"spec.template", "", dig(d.Obj, "spec", "template")})
	case gvk{"v1", "Pod"}:
		raw = append(raw, found{"", "", map[string]any{"metadata": d.Obj["metadata"], "spec": d.Obj["spec"]}})
	}
	var out []podTemplate
	var errs []string
	for _, f := range raw {
		if f.v == nil {
			errs = append(errs, f.path+": missing pod template")
			continue
		}
		b, err := yaml.Marshal(f.v)
		if err != nil {
			errs = append(errs, f.path+": "+err.Error())
			continue
		}
		var pt corev1.PodTemplateSpec
		if err := strictYAML(b, &pt); err != nil {
			errs = append(errs, f.path+": as a core/v1 PodTemplateSpec: "+err.Error())
			continue
		}
		out = append(out, podTemplate{Path: f.path, Role: f.role, Spec: pt})
	}
	return out, errs
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// restrictedVolumeOK reports whether a volume type is allowed by the
// restricted Pod Security Standard.
func restrictedVolumeOK(v corev1.Volume) bool {
	s := v.VolumeSource
	// Image volumes: allowed since the policy of Kubernetes 1.33, the first
	// that serves them by default (deploy/image-volume).
	return s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil ||
		s.Ephemeral != nil || s.Image != nil || s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil
}

// checkRestricted applies the restricted Pod Security Standard
// (kubernetes.io/docs/concepts/security/pod-security-standards, v1.30+) and
// podmpi's read-only-root rule to one pod template.
func checkRestricted(p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	ps := p.Spec.Spec
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		at("hostNetwork/hostPID/hostIPC are forbidden")
	}
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		at("securityContext.runAsUser 0 is forbidden")
	}
	for _, v := range ps.Volumes {
		if !restrictedVolumeOK(v) {
			at("volume %q: type not allowed by the restricted standard", v.Name)
		}
	}
	emptyDirs := map[string]bool{}
	for _, v := range ps.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	all := append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...)
	if len(ps.Containers) == 0 {
		at("no containers")
	}
	for _, c := range all {
		cat := func(format string, a ...any) { at("container %q: "+format, append([]any{c.Name}, a...)...) }
		sc := c.SecurityContext
		if sc == nil {
			cat("no securityContext")
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			cat("privileged is forbidden")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			cat("allowPrivilegeEscalation must be false")
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		if !nonRoot {
			cat("runAsNonRoot must be true (container or pod)")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			cat("runAsUser 0 is forbidden")
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			cat("seccompProfile must be RuntimeDefault or Localhost (container or pod)")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			cat("capabilities.drop must contain ALL")
		}
		if sc.Capabilities != nil {
			for _, a := range sc.Capabilities.Add {
				if a != "NET_BIND_SERVICE" {
					cat("capability %s may not be added", a)
				}
			}
		}
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				cat("hostPort %d is forbidden", port.HostPort)
			}
		}
		// podmpi: read-only root, and /tmp is writable through an emptyDir
		// (init containers write only where they mount a volume).
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			cat("readOnlyRootFilesystem must be true")
		}
		if slices.ContainsFunc(ps.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name }) {
			continue
		}
		tmp := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/tmp" && emptyDirs[m.Name] {
				tmp = true
			}
		}
		if !tmp {
			cat("/tmp must be an emptyDir mount (read-only root: MPI session dirs, the launcher's hostfile)")
		}
	}
	return errs
}

// sdkHome is the Kubeflow SDK's DEFAULT_MPI_USER_HOME: its MPI command
// writes the training function there, on the launcher and every node.
const sdkHome = "/home/mpiuser"

// mountsEmptyDir reports whether container c of pod spec ps mounts an
// emptyDir volume at path.
func mountsEmptyDir(ps corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				return true
			}
		}
	}
	return false
}

// checkPodmpiRoles checks what podmpi's images and the operators need of the
// launcher and worker containers.
func checkPodmpiRoles(d document, p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	if len(p.Spec.Spec.Containers) == 0 {
		return nil
	}
	trainer := strings.HasPrefix(d.GVK.APIVersion, "trainer.kubeflow.org/")
	c := p.Spec.Spec.Containers[0]
	if trainer && c.Name != "node" {
		at("container %q: Trainer mounts the SSH Secret and hostfile only into containers named \"node\"", c.Name)
	}
	if trainer && !mountsEmptyDir(p.Spec.Spec, c, sdkHome) {
		at("container %q: %s must be an emptyDir mount: the Kubeflow SDK's command writes the training function there on every rank, and the root is read-only", c.Name, sdkHome)
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	switch p.Role {
	case "worker":
		if len(argv) == 0 || !isPodmpiProgram(argv[0], "worker-agent") {
			at("worker container %q must run worker-agent, runs %q", c.Name, argv)
		}
		rp := c.ReadinessProbe
		if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.IntValue() != 9022 {
			at("worker container %q needs readinessProbe httpGet /readyz on port 9022 (the launcher starts when workers are Ready)", c.Name)
		}
	case "launcher":
		if len(c.Command) < 2 || !isPodmpiProgram(c.Command[0], "launcher") || !slices.Contains(argv, "--") {
			at("launcher container %q must run \"launcher [flags] -- mpirun ...\", runs %q", c.Name, argv)
		}
	default:
		at("unknown role: want a node/launcher replicated job or a Launcher/Worker replica spec")
	}
	return errs
}

// TestManifestsValidate renders every overlay and reads every migration
// pair, and runs every check on each object: the CRD schemas of every
// release in testdata/crds, strict decoding of core objects and pod
// templates, the restricted Pod Security Standard and podmpi's own rules.
// Pod conventions every MPI pod template of the examples follows.
const (
	// mpiLabel is the label the namespace-wide NetworkPolicy selects: the
	// operators' own labels differ (JobSet's jobset-name, mpi-operator's
	// training.kubeflow.org/job-name), so the templates set this one.
	mpiLabel, mpiLabelValue = "podmpi.io/mpi", "true"
	// istioInject keeps an Istio sidecar out: it would intercept port 2222.
	istioInject, istioInjectValue = "sidecar.istio.io/inject", "false"
)

// checkPodConventions: the NetworkPolicy label, no Istio sidecar, the log
// tail as termination message when the container writes none, and no
// mpirun time limit (multi-day jobs are normal; the docs say how to set one).
func checkPodConventions(p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	if p.Spec.Labels[mpiLabel] != mpiLabelValue {
		at("pod template lacks label %s: %q (the namespace-wide NetworkPolicy selects MPI pods by it)", mpiLabel, mpiLabelValue)
	}
	if p.Spec.Annotations[istioInject] != istioInjectValue {
		at("pod template lacks annotation %s: %q (an Istio sidecar answers port 2222 instead of worker-agent)", istioInject, istioInjectValue)
	}
	all := append(append([]corev1.Container{}, p.Spec.Spec.InitContainers...), p.Spec.Spec.Containers...)
	for _, c := range all {
		if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			at("container %q: terminationMessagePolicy %q, want FallbackToLogsOnError (the log tail shows in the pod status when nothing was written to the termination log)",
				c.Name, c.TerminationMessagePolicy)
		}
		var env []string
		for _, e := range c.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		errs = append(errs, mpirunTimeoutProblems(p.Path+": container "+strconv.Quote(c.Name), env, append(append([]string{}, c.Command...), c.Args...))...)
	}
	return errs
}

// mpirunTimeoutProblems reports a non-zero mpirun time limit in env
// (NAME=value) or argv.
func mpirunTimeoutProblems(where string, env, argv []string) []string {
	var errs []string
	limited := func(v string) bool {
		d, err := time.ParseDuration(v)
		return err != nil || d != 0
	}
	for _, kv := range env {
		if name, v, _ := strings.Cut(kv, "="); name == "PODMPI_MPIRUN_TIMEOUT" && limited(v) {
			errs = append(errs, fmt.Sprintf("%s: PODMPI_MPIRUN_TIMEOUT=%s stops long jobs (exit 69); examples run mpirun without a time limit", where, v))
		}
	}
	for i, a := range argv {
		if a == "--" {
			break // mpirun's own arguments follow
		}
		v, ok := strings.CutPrefix(a, "--mpirun.timeout=")
		if !ok && a == "--mpirun.timeout" && i+1 < len(argv) {
			v, ok = argv[i+1], true
		}
		if ok && limited(v) {
			errs = append(errs, fmt.Sprintf("%s: --mpirun.timeout %s stops long jobs (exit 69); examples run mpirun without a time limit", where, v))
		}
	}
	return errs
}

func TestManifestsValidate(t *testing.T) {
	crds := loadCRDs(t)
	sets := loadManifestSets(t)
	runtimes := allRuntimes(sets)
	for _, set := range sets {
		seen := map[string]string{}
		for _, d := range set.Docs {
			t.Run(set.Name+"/"+d.GVK.Kind+"/"+d.Name, func(t *testing.T) {
				key := d.GVK.String() + "/" + d.Name
				if prev, dup := seen[key]; dup {
					t.Errorf("%s: same kind and name as %s: kubectl apply of both would overwrite one", d, prev)
				}
				seen[key] = d.String()
				errs, npt := checkDocument(d, crds, runtimes)
				for _, e := range errs {
					t.Errorf("%s: %s", d, e)
				}
				if len(errs) == 0 {
					t.Logf("%s: valid against %v (%d pod templates checked)", d, crds.namesFor(d.GVK), npt)
				}
			})
		}
	}
}

// checkDocument runs every check on one document and returns the problems
// and the number of pod templates it checked.
func checkDocument(d document, crds crdSets, runtimes map[string]bool) ([]string, int) {
	var errs []string
	errs = append(errs, validateMetadata(d)...)
	if schemas := crds.schemasFor(d.GVK); len(schemas) > 0 {
		for _, s := range schemas {
			for _, e := range validateObject(s.schema, d.Obj) {
				if imageVolumeUnknown.MatchString(e) && slices.Contains(imageVolumeTooOld, s.set) {
					continue // documented: image volumes need a newer release
				}
				errs = append(errs, "["+s.set+"] "+e)
			}
		}
	} else if mk, ok := coreKinds[d.GVK]; ok {
		if err := strictYAML(d.Raw, mk()); err != nil {
			errs = append(errs, "as "+d.GVK.String()+": "+err.Error())
		}
	} else {
		errs = append(errs, fmt.Sprintf("no schema for %s: add its CRD to a release directory under examples/%s or its type to coreKinds", d.GVK, crdDir))
	}
	pts, perrs := podTemplates(d)
	errs = append(errs, perrs...)
	for _, p := range pts {
		errs = append(errs, checkRestricted(p)...)
		errs = append(errs, checkPodmpiRoles(d, p)...)
		errs = append(errs, checkPodConventions(p)...)
		errs = append(errs, checkAPIAccess(p)...)
		if !isMigrationDoc(d) {
			errs = append(errs, checkBringsPodmpi(p)...)
			errs = append(errs, checkRunAs(p)...)
		}
	}
	errs = append(errs, checkKindRules(d, runtimes)...)
	return errs, len(pts)
}

// checkKindRules holds the rules specific to one kind.
func checkKindRules(d document, runtimes map[string]bool) []string {
	var errs []string
	switch d.GVK {
	case gvk{"trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"}, gvk{"trainer.kubeflow.org/v1alpha1", "TrainingRuntime"}:
		errs = append(errs, checkLauncherPods(d)...)
		errs = append(errs, sdkLimitsProblems(d)...)
		errs = append(errs, trainerLauncherFailureProblems(d)...)
		mpi, _ := dig(d.Obj, "spec", "mlPolicy", "mpi").(map[string]any)
		if mpi == nil {
			return []string{"spec.mlPolicy.mpi: required for an MPI runtime"}
		}
		if p, _ := mpi["sshAuthMountPath"].(string); p != "/home/mpiuser/.ssh" {
			errs = append(errs, fmt.Sprintf("spec.mlPolicy.mpi.sshAuthMountPath %q: the images' user is mpiuser; want /home/mpiuser/.ssh", p))
		}
		rjs, _ := dig(d.Obj, "spec", "template", "spec", "replicatedJobs").([]any)
		var names []string
		for i, rj := range rjs {
			n, _ := dig(rj, "name").(string)
			names = append(names, n)
			if len(n) > maxReplicatedJobName {
				errs = append(errs, fmt.Sprintf("replicatedJobs[%d].name %q: %d characters; Trainer v2.4 refuses a runtime whose replicated job names are longer than %d",
					i, n, len(n), maxReplicatedJobName))
			}
		}
		if !slices.Equal(names, []string{"node", "launcher"}) {
			errs = append(errs, fmt.Sprintf("replicatedJobs %v: want [node launcher] (node first: Trainer orders the hostfile by replicated job)", names))
		} else {
			dep := canonical(dig(rjs[1], "dependsOn"))
			if dep != `[{"name":"node","status":"Ready"}]` {
				errs = append(errs, "replicatedJobs[1] (launcher): want dependsOn [{name: node, status: Ready}], got "+dep)
			}
			if canonical(dig(rjs[1], "template", "metadata", "labels", "trainer.kubeflow.org/trainjob-ancestor-step")) != `"trainer"` {
				errs = append(errs, "replicatedJobs[1] (launcher): want label trainer.kubeflow.org/trainjob-ancestor-step: trainer (TrainJob args go there, not to the workers)")
			}
		}
	case gvk{"trainer.kubeflow.org/v1alpha1", "TrainJob"}:
		name, _ := dig(d.Obj, "spec", "runtimeRef", "name").(string)
		if !runtimes[name] {
			errs = append(errs, fmt.Sprintf("spec.runtimeRef.name %q: no ClusterTrainingRuntime of that name in deploy/ or examples/", name))
		}
		if dig(d.Obj, "spec", "trainer", "command") != nil {
			errs = append(errs, "spec.trainer.command replaces the runtime's \"launcher --\"; set spec.trainer.args")
		}
		// trainer.env reaches the launcher container; trainer.args follow
		// "launcher --", so none of them is a launcher flag.
		var env []string
		envs, _ := dig(d.Obj, "spec", "trainer", "env").([]any)
		for _, e := range envs {
			n, _ := dig(e, "name").(string)
			v, _ := dig(e, "value").(string)
			env = append(env, n+"="+v)
		}
		errs = append(errs, mpirunTimeoutProblems("spec.trainer", env, nil)...)
		errs = append(errs, sdkLimitsProblems(d)...)
	case gvk{"kubeflow.org/v2beta1", "MPIJob"}:
		if p, _ := dig(d.Obj, "spec", "sshAuthMountPath").(string); p != "/home/mpiuser/.ssh" {
			errs = append(errs, fmt.Sprintf("spec.sshAuthMountPath %q: want /home/mpiuser/.ssh", p))
		}
		errs = append(errs, mpiJobLauncherFailureProblems(d)...)
	}
	return errs
}

// sdkDevices are the limits the Kubeflow Python SDK (0.5.0) knows a device
// by (kubeflow.trainer.backends.kubernetes.utils.get_container_devices):
// limits that name none of them, memory alone say, make it raise "Unknown
// device type in the container resources" for the runtime (get_runtime,
// train) and for every pod of a job (get_job, wait_for_job_status,
// get_job_logs, list_jobs).
var sdkDevices = []string{"cpu", "nvidia.com/gpu", "google.com/tpu", "huawei.com/Ascend910"}

// sdkLimitsProblems reports the resources of a runtime's node containers or
// of a TrainJob's resourcesPerNode whose limits name no device the SDK
// knows. The migration pairs keep their MPIJob's memory-only limits (their
// TrainJob side mirrors the MPIJob; docs/migration.md says what the SDK
// needs), so only the shipped runtimes and TrainJobs are held to it.
func sdkLimitsProblems(d document) []string {
	if isMigrationDoc(d) {
		return nil
	}
	check := func(where string, res any) []string {
		limits, _ := dig(res, "limits").(map[string]any)
		if len(limits) == 0 {
			return nil
		}
		for name := range limits {
			if slices.Contains(sdkDevices, name) || strings.HasPrefix(name, "nvidia.com/mig-") {
				return nil
			}
		}
		return []string{fmt.Sprintf("%s: limits %s name no cpu or accelerator: the Kubeflow SDK (0.5.0) fails on such a runtime or pod (\"Unknown device type in the container resources\"); drop the limits or name cpu too", where, canonical(limits))}
	}
	if d.GVK.Kind == "TrainJob" {
		return check("spec.trainer.resourcesPerNode", dig(d.Obj, "spec", "trainer", "resourcesPerNode"))
	}
	var errs []string
	rjs, _ := dig(d.Obj, "spec", "template", "spec", "replicatedJobs").([]any)
	for i, rj := range rjs {
		cs, _ := dig(rj, "template", "spec", "template", "spec", "containers").([]any)
		for j, c := range cs {
			errs = append(errs, check(fmt.Sprintf("replicatedJobs[%d] container[%d] resources", i, j), dig(c, "resources"))...)
		}
	}
	return errs
}

// ancestorLabel marks the replicated job that Trainer gives the TrainJob's
// trainer settings (command, args, image, resources) and sizes from the
// runtime's mlPolicy.numNodes.
const ancestorLabel = "trainer.kubeflow.org/trainjob-ancestor-step"

// checkLauncherPods fails a runtime that would start more than one launcher
// pod. Trainer sizes the replicated job labelled ancestorLabel=trainer from
// the runtime's mlPolicy.numNodes (a missing value means 1), while its MPI
// plugin sizes only the "node" job from the TrainJob; so when that job is the
// launcher, numNodes must be 1 and the job itself must not ask for more than
// one pod (replicas, parallelism, completions).
func checkLauncherPods(d document) []string {
	var errs []string
	rjs, _ := dig(d.Obj, "spec", "template", "spec", "replicatedJobs").([]any)
	for i, rj := range rjs {
		if dig(rj, "template", "metadata", "labels", ancestorLabel) != "trainer" {
			continue
		}
		cs, _ := dig(rj, "template", "spec", "template", "spec", "containers").([]any)
		launcher := false
		for _, c := range cs {
			cmd := strs(dig(c, "command"))
			if len(cmd) > 0 && isPodmpiProgram(cmd[0], "launcher") {
				launcher = true
			}
		}
		if !launcher {
			continue
		}
		name, _ := dig(rj, "name").(string)
		where := fmt.Sprintf("replicatedJobs[%d] (%s, labelled %s: trainer, runs the launcher)", i, name, ancestorLabel)
		if n, ok := dig(d.Obj, "spec", "mlPolicy", "numNodes").(json.Number); ok && n.String() != "1" {
			errs = append(errs, fmt.Sprintf("spec.mlPolicy.numNodes %s: Trainer sizes %s from this value, so %s launcher pods would start; "+
				"keep numNodes 1 in the runtime and set trainer.numNodes in the TrainJob", n, where, n))
		}
		for _, f := range [][]string{{"replicas"}, {"template", "spec", "parallelism"}, {"template", "spec", "completions"}} {
			if n, ok := dig(rj, f...).(json.Number); ok && n.String() != "1" {
				errs = append(errs, fmt.Sprintf("%s: %s %s would start more than one launcher pod; want 1", where, strings.Join(f, "."), n))
			}
		}
	}
	return errs
}

// TestManifestsCoverIssue pins the set of examples the project promises.
func TestManifestsCoverIssue(t *testing.T) {
	docs := allDocuments(t)
	count := map[string]int{}
	images := map[string]bool{}
	for _, d := range docs {
		count[d.GVK.Kind]++
		for _, m := range regexp.MustCompile(`image: (\S+)`).FindAllSubmatch(d.Raw, -1) {
			images[string(m[1])] = true
		}
	}
	for kind, n := range map[string]int{"ClusterTrainingRuntime": 3, "TrainJob": 1, "MPIJob": 1, "NetworkPolicy": 2} {
		if count[kind] < n {
			t.Errorf("want at least %d %s in examples/, have %d", n, kind, count[kind])
		}
	}
	for _, mpi := range []string{"openmpi", "mpich", "intelmpi"} {
		ok := false
		for img := range images {
			if strings.Contains(img, "/"+mpi+":") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("no manifest uses the %s image (have %v)", mpi, sortedKeys(images))
		}
	}
}

// TestComposeConfig runs "docker-compose config" (v1) or "docker compose
// config" (v2) on the compose file, the check Compose itself makes.
func TestComposeConfig(t *testing.T) {
	file := filepath.Join("compose", "docker-compose.yaml")
	var argv []string
	if p, err := exec.LookPath("docker-compose"); err == nil {
		argv = []string{p, "-f", file, "config", "-q"}
	} else if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "compose", "version").Run() == nil {
		argv = []string{p, "compose", "-f", file, "config", "-q"}
	} else {
		t.Skip("neither docker-compose nor the docker compose plugin is installed (apt-get install -y docker-compose)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out.String())
	}
	// Also check the parts Compose accepts but podmpi needs.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read_only: true", "- ALL", "no-new-privileges:true", "/tmp", "--exit-code-from launcher"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("%s: missing %q", file, want)
		}
	}
}

// TestSplitYAML covers the document splitter used for every manifest.
func TestSplitYAML(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"# only a comment\n", 0},
		{"a: 1\n", 1},
		{"---\na: 1\n", 1},
		{"a: 1\n---\nb: 2\n", 2},
		{"a: 1\n---\n# comment\n---\nb: 2\n", 2},
		{"a: '---'\n", 1},
		{"a: |\n  x\n  ---x\n", 1},
	} {
		if got := len(splitYAML([]byte(tc.in))); got != tc.want {
			t.Errorf("splitYAML(%q): %d documents, want %d", tc.in, got, tc.want)
		}
	}
}

func FuzzParseDocument(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"a: 1\n---\nb: [1, 2]\n",
		"apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: x}\nspec: {mpiReplicaSpecs: {}}\n",
		"- 1\n- 2\n",
		"x: !!binary AAA=\n",
		"{",
	} {
		f.Add([]byte(s))
	}
	crds := loadCRDs(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, raw := range splitYAML(b) {
			d, err := parseDocument("fuzz.yaml", i, raw)
			if err != nil {
				continue
			}
			_ = validateMetadata(d)
			for _, l := range crds {
				for _, s := range l {
					_ = validateObject(s.schema, d.Obj)
				}
			}
			_, _ = podTemplates(d)
		}
	})
}
