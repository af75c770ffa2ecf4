package examples

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// loadExample reads one example document and returns it as a fresh,
// mutable document.
func loadExample(t *testing.T, file string, index int) document {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs := splitYAML(b)
	if index >= len(docs) {
		t.Fatalf("%s has %d documents, want index %d", file, len(docs), index)
	}
	d, err := parseDocument(file, index, docs[index])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mutate applies f to a deep copy of d.Obj and re-encodes Raw from it, so
// that the strict decoders see the same change as the schema validator.
func mutate(t *testing.T, d document, f func(obj map[string]any)) document {
	t.Helper()
	js, err := json.Marshal(d.Obj)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(map[string]any)
	f(obj)
	raw, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := parseDocument(d.File, d.Index, raw)
	if err != nil {
		t.Fatal(err)
	}
	return d2
}

// at returns the map at path (keys, or "[i]" for list items), failing the
// test when it is missing.
func at(t *testing.T, v any, path ...string) map[string]any {
	t.Helper()
	for _, k := range path {
		if strings.HasPrefix(k, "[") {
			i, err := strconv.Atoi(strings.Trim(k, "[]"))
			if err != nil {
				t.Fatalf("bad index %q", k)
			}
			l, ok := v.([]any)
			if !ok || i >= len(l) {
				t.Fatalf("path %v: no item %s", path, k)
			}
			v = l[i]
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("path %v: %q is not under a map", path, k)
		}
		v = m[k]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("path %v: not a map", path)
	}
	return m
}

// TestChecksReject proves each check fails on a manifest that breaks it:
// the clean examples passing means something only because these fail.
func TestChecksReject(t *testing.T) {
	crds := loadCRDs(t)
	runtimes := map[string]bool{"podmpi-openmpi": true}
	// The sample MPIJob as its kustomization renders it, with podmpi brought
	// in by deploy/mpi-operator.
	mpiJobs, err := render(sampleMPIJobs)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(mpiJobs, func(d document) bool { return d.GVK.Kind == "MPIJob" && d.Name == "allreduce" })
	if i < 0 {
		t.Fatalf("examples/%s renders no MPIJob allreduce", sampleMPIJobs)
	}
	mpijob := mpiJobs[i]
	ctr := loadExample(t, deployDir+"/runtimes/clustertrainingruntime-openmpi.yaml", 0)
	trainjob := loadExample(t, "trainer/trainjob-allreduce.yaml", 0)
	netpol := loadExample(t, deployDir+"/networkpolicy/networkpolicy.yaml", 0)

	worker := []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", "[0]"}
	node := []string{"spec", "template", "spec", "replicatedJobs", "[0]", "template", "spec", "template", "spec", "containers", "[0]"}
	launcherJob := []string{"spec", "template", "spec", "replicatedJobs", "[1]", "template", "spec"}
	launcherPod := append(slices.Clone(launcherJob), "template", "spec")

	for _, tc := range []struct {
		name string
		doc  document
		f    func(t *testing.T, o map[string]any)
		want string // substring of one reported problem
	}{
		{"MPIJob misspelt spec field", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["slotPerWorker"] = json.Number("2")
		}, "spec.slotPerWorker: unknown field"},
		{"MPIJob missing required mpiReplicaSpecs", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec"), "mpiReplicaSpecs")
		}, "spec.mpiReplicaSpecs: required field missing"},
		{"MPIJob enum", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["mpiImplementation"] = "OpenMPI5"
		}, `string "OpenMPI5" is not one of`},
		{"MPIJob wrong type", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["slotsPerWorker"] = "two"
		}, "spec.slotsPerWorker: want integer"},
		{"MPIJob int32 overflow", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["slotsPerWorker"] = json.Number("4294967296")
		}, "overflows int32"},
		{"unknown field deep in a pod template", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "securityContext")...)["readOnlyRootFileSystem"] = true
		}, "securityContext.readOnlyRootFileSystem: unknown field"},
		{"pod template fails strict core/v1 decode", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "securityContext")...)["readOnlyRootFileSystem"] = true
		}, `as a core/v1 PodTemplateSpec: unknown field "spec.containers[0].securityContext.readOnlyRootFileSystem"`},
		{"int-or-string rejects a boolean", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "readinessProbe", "httpGet")...)["port"] = true
		}, "readinessProbe.httpGet.port: want integer or string"},
		{"list-type map rejects duplicate keys", mpijob, func(t *testing.T, o map[string]any) {
			c := at(t, o, worker...)
			ports := c["ports"].([]any)
			c["ports"] = append(ports, ports[0])
		}, "duplicate key"},
		{"missing required container name", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, worker...), "name")
		}, "containers[0].name: required field missing"},
		{"restricted: privilege escalation", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "securityContext")...)["allowPrivilegeEscalation"] = true
		}, "allowPrivilegeEscalation must be false"},
		{"restricted: capabilities not dropped", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, append(worker, "securityContext")...), "capabilities")
		}, "capabilities.drop must contain ALL"},
		{"restricted: seccomp", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, append(worker, "securityContext")...), "seccompProfile")
			delete(at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "securityContext"), "seccompProfile")
		}, "seccompProfile must be RuntimeDefault"},
		{"restricted: root allowed", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, append(worker, "securityContext")...), "runAsNonRoot")
			delete(at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "securityContext"), "runAsNonRoot")
		}, "runAsNonRoot must be true"},
		{"restricted: hostPath volume", mpijob, func(t *testing.T, o map[string]any) {
			s := at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec")
			s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "host", "hostPath": map[string]any{"path": "/"}})
		}, `volume "host": type not allowed`},
		{"podmpi: writable root", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "securityContext")...)["readOnlyRootFilesystem"] = false
		}, "readOnlyRootFilesystem must be true"},
		{"podmpi: no /tmp emptyDir", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, worker...), "volumeMounts")
		}, "/tmp must be an emptyDir mount"},
		{"podmpi: worker probe", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, append(worker, "readinessProbe", "httpGet")...)["path"] = "/healthz"
		}, "needs readinessProbe httpGet /readyz"},
		{"podmpi: worker runs sshd", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, worker...)["command"] = []any{"/usr/sbin/sshd"}
		}, "must run worker-agent"},
		{"Trainer: no writable SDK home", ctr, func(t *testing.T, o map[string]any) {
			c := at(t, o, node...)
			var mounts []any
			for _, m := range c["volumeMounts"].([]any) {
				if m.(map[string]any)["mountPath"] != "/home/mpiuser" {
					mounts = append(mounts, m)
				}
			}
			c["volumeMounts"] = mounts
		}, "/home/mpiuser must be an emptyDir mount"},
		{"Trainer: container not named node", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, node...)["name"] = "worker"
		}, `only into containers named "node"`},
		{"Trainer: enum allows only OpenMPI", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mlPolicy", "mpi")["mpiImplementation"] = "MPICH"
		}, `string "MPICH" is not one of`},
		{"Trainer: launcher without dependsOn", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "template", "spec", "replicatedJobs", "[1]"), "dependsOn")
		}, "want dependsOn"},
		{"Trainer: numProcPerNode type", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mlPolicy", "mpi")["numProcPerNode"] = json.Number("1.5")
		}, "mpi.numProcPerNode: want integer"},
		{"Trainer: runtime numNodes starts several launchers", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mlPolicy")["numNodes"] = json.Number("3")
		}, "so 3 launcher pods would start"},
		{"Trainer: launcher job with several replicas", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "template", "spec", "replicatedJobs", "[1]")["replicas"] = json.Number("2")
		}, "replicas 2 would start more than one launcher pod"},
		{"Trainer: launcher job with parallelism 2", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "template", "spec", "replicatedJobs", "[1]", "template", "spec")["parallelism"] = json.Number("2")
		}, "parallelism 2 would start more than one launcher pod"},
		{"pod: no NetworkPolicy label", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "metadata", "labels"), "podmpi.io/mpi")
		}, `lacks label podmpi.io/mpi: "true"`},
		{"pod: Istio sidecar not refused", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "template", "spec", "replicatedJobs", "[0]", "template", "spec", "template", "metadata", "annotations")["sidecar.istio.io/inject"] = "true"
		}, `lacks annotation sidecar.istio.io/inject: "false"`},
		{"container: terminationMessagePolicy", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, node...), "terminationMessagePolicy")
		}, "want FallbackToLogsOnError"},
		{"launcher: mpirun time limit in env", ctr, func(t *testing.T, o map[string]any) {
			c := at(t, o, "spec", "template", "spec", "replicatedJobs", "[1]", "template", "spec", "template", "spec", "containers", "[0]")
			c["env"] = append(c["env"].([]any), map[string]any{"name": "PODMPI_MPIRUN_TIMEOUT", "value": "24h"})
		}, "PODMPI_MPIRUN_TIMEOUT=24h stops long jobs"},
		{"launcher: mpirun time limit flag", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", "[0]")["command"] = []any{"launcher", "--mpirun.timeout", "48h", "--"}
		}, "--mpirun.timeout 48h stops long jobs"},
		{"TrainJob: mpirun time limit in env", trainjob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "trainer")["env"] = []any{map[string]any{"name": "PODMPI_MPIRUN_TIMEOUT", "value": "1h"}}
		}, "spec.trainer: PODMPI_MPIRUN_TIMEOUT=1h"},
		{"TrainJob: unknown runtime", trainjob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "runtimeRef")["name"] = "nope"
		}, `no ClusterTrainingRuntime of that name`},
		{"TrainJob: missing runtimeRef", trainjob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec"), "runtimeRef")
		}, "spec.runtimeRef: required field missing"},
		{"TrainJob: args too long", trainjob, func(t *testing.T, o map[string]any) {
			args := make([]any, 129)
			for i := range args {
				args[i] = "x"
			}
			at(t, o, "spec", "trainer")["args"] = args
		}, "exceed maxItems 128"},
		{"Trainer launcher: restartPolicy OnFailure", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherPod...)["restartPolicy"] = "OnFailure"
		}, `restartPolicy "OnFailure": want Never`},
		{"Trainer launcher: restartPolicy left to JobSet", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, launcherPod...), "restartPolicy")
		}, `restartPolicy "": want Never`},
		{"Trainer launcher: no podFailurePolicy", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, launcherJob...), "podFailurePolicy")
		}, "podFailurePolicy.rules[0]: want {action: Ignore"},
		{"Trainer launcher: FailJob before the disruption rule", ctr, func(t *testing.T, o map[string]any) {
			p := at(t, o, append(launcherJob, "podFailurePolicy")...)
			r := p["rules"].([]any)
			p["rules"] = []any{r[1], r[0]}
		}, "podFailurePolicy.rules[0]: want {action: Ignore"},
		{"Trainer launcher: disruption counted", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, append(launcherJob, "podFailurePolicy", "rules", "[0]")...)["action"] = "Count"
		}, "podFailurePolicy.rules[0]: want {action: Ignore"},
		{"Trainer launcher: FailJob on another container", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, append(launcherJob, "podFailurePolicy", "rules", "[1]", "onExitCodes")...)["containerName"] = "sidecar"
		}, "podFailurePolicy.rules[1]: want {action: FailJob, onExitCodes: {containerName: node"},
		{"Trainer launcher: FailJob on some codes only", ctr, func(t *testing.T, o map[string]any) {
			e := at(t, o, append(launcherJob, "podFailurePolicy", "rules", "[1]", "onExitCodes")...)
			e["operator"], e["values"] = "In", []any{json.Number("66"), json.Number("67")}
		}, "podFailurePolicy.rules[1]: want {action: FailJob"},
		{"Trainer launcher: default backoffLimit", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, launcherJob...), "backoffLimit")
		}, "backoffLimit unset (6): want 0..3"},
		{"Trainer launcher: large backoffLimit", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherJob...)["backoffLimit"] = json.Number("6")
		}, "backoffLimit 6: want 0..3"},
		{"MPIJob launcher: restartPolicy OnFailure", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mpiReplicaSpecs", "Launcher")["restartPolicy"] = "OnFailure"
		}, `Launcher.restartPolicy "OnFailure": want Never`},
		{"MPIJob launcher: restartPolicy in the pod template", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec")["restartPolicy"] = "Never"
		}, "mpi-operator overrides this one"},
		{"MPIJob: backoffLimit retries", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "runPolicy")["backoffLimit"] = json.Number("2")
		}, "spec.runPolicy.backoffLimit 2: want 0"},
		{"MPIJob: default backoffLimit", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "runPolicy"), "backoffLimit")
		}, "spec.runPolicy.backoffLimit unset (6): want 0"},
		{"launcher: no token", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherPod...)["automountServiceAccountToken"] = false
		}, "automountServiceAccountToken false: want true"},
		{"launcher: token left to the ServiceAccount", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec"), "automountServiceAccountToken")
		}, "automountServiceAccountToken unset: want true"},
		{"launcher: a ServiceAccount of its own", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherPod...)["serviceAccountName"] = "podmpi-launcher"
		}, `serviceAccountName "podmpi-launcher": leave it unset`},
		{"launcher: no pod uid", mpijob, func(t *testing.T, o map[string]any) {
			c := at(t, o, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", "[0]")
			c["env"] = slices.DeleteFunc(slices.Clone(c["env"].([]any)), func(e any) bool { return dig(e, "name") == "PODMPI_KUBE_POD_UID" })
		}, `env PODMPI_KUBE_POD_UID from fieldRef "", want "metadata.uid"`},
		{"launcher: pod name from the wrong field", ctr, func(t *testing.T, o map[string]any) {
			for _, e := range at(t, o, append(launcherPod, "containers", "[0]")...)["env"].([]any) {
				if dig(e, "name") == "PODMPI_KUBE_POD_NAME" {
					at(t, e, "valueFrom", "fieldRef")["fieldPath"] = "metadata.namespace"
				}
			}
		}, `env PODMPI_KUBE_POD_NAME from fieldRef "metadata.namespace", want "metadata.name"`},
		{"worker: token", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec")["automountServiceAccountToken"] = true
		}, "automountServiceAccountToken true: want false"},
		{"worker: token left to the ServiceAccount", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "template", "spec", "replicatedJobs", "[0]", "template", "spec", "template", "spec"), "automountServiceAccountToken")
		}, "automountServiceAccountToken unset: want false"},
		{"runtime: memory-only limits the Kubeflow SDK refuses", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, append(slices.Clone(launcherPod), "containers", "[0]", "resources")...)["limits"] = map[string]any{"memory": "1Gi"}
		}, `replicatedJobs[1] container[0] resources: limits {"memory":"1Gi"} name no cpu or accelerator`},
		{"TrainJob: memory-only limits the Kubeflow SDK refuses", trainjob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "trainer", "resourcesPerNode")["limits"] = map[string]any{"memory": "1Gi"}
		}, `spec.trainer.resourcesPerNode: limits {"memory":"1Gi"} name no cpu or accelerator`},
		// Trainer v2.2.1's CRDs embed Kubernetes 1.36's pod spec, whose
		// group scheduling field is schedulingGroup; v2.2.0's embed 1.35's,
		// where it was workloadRef. Each release's schema must refuse the
		// other's name, so both releases are checked, not one twice.
		{"pod template: v2.2.1's schedulingGroup under v2.2.0", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherPod...)["schedulingGroup"] = map[string]any{"podGroupName": "g"}
		}, "[trainer-v2.2.0] spec.template.spec.replicatedJobs[1].template.spec.template.spec.schedulingGroup: unknown field"},
		{"pod template: v2.2.0's workloadRef under v2.2.1", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, launcherPod...)["workloadRef"] = map[string]any{"name": "w", "podGroup": "g"}
		}, "[trainer-v2.2.1] spec.template.spec.replicatedJobs[1].template.spec.template.spec.workloadRef: unknown field"},
		{"podmpi: runtime without the init container", ctr, func(t *testing.T, o map[string]any) {
			delete(at(t, o, node[:len(node)-2]...), "initContainers")
		}, `volume "podmpi" is an emptyDir, but no init container "podmpi" fills it`},
		{"podmpi: init container copies elsewhere", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, append(slices.Clone(launcherPod), "initContainers", "[0]")...)["command"] = []any{"/opt/podmpi/bin/launcher", "install", "/tmp"}
		}, `runs ["/opt/podmpi/bin/launcher" "install" "/tmp"], want ["/opt/podmpi/bin/launcher" "install" "/podmpi"]`},
		{"podmpi: init container from the MPI image", mpijob, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "initContainers", "[0]")["image"] = "ghcr.io/podmpi/openmpi:v0.1.0"
		}, `want the binaries-only image <registry>/podmpi`},
		{"podmpi: no podmpi volume", mpijob, func(t *testing.T, o map[string]any) {
			s := at(t, o, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec")
			s["volumes"] = slices.DeleteFunc(slices.Clone(s["volumes"].([]any)), func(v any) bool { return dig(v, "name") == "podmpi" })
		}, `no volume "podmpi"`},
		{"podmpi: PATH without /opt/podmpi/bin first", mpijob, func(t *testing.T, o map[string]any) {
			for _, e := range at(t, o, worker...)["env"].([]any) {
				if dig(e, "name") == "PATH" {
					e.(map[string]any)["value"] = "/usr/local/bin:/usr/bin:/bin:/opt/podmpi/bin"
				}
			}
		}, `must start with /opt/podmpi/bin`},
		{"podmpi: PATH without the image's /usr/bin", ctr, func(t *testing.T, o map[string]any) {
			for _, e := range at(t, o, node...)["env"].([]any) {
				if dig(e, "name") == "PATH" {
					e.(map[string]any)["value"] = "/opt/podmpi/bin:/bin"
				}
			}
		}, `lacks /usr/bin`},
		{"podmpi: no PATH", ctr, func(t *testing.T, o map[string]any) {
			c := at(t, o, node...)
			c["env"] = slices.DeleteFunc(slices.Clone(c["env"].([]any)), func(e any) bool { return dig(e, "name") == "PATH" })
		}, `sets no PATH`},
		{"podmpi: /opt/podmpi writable", ctr, func(t *testing.T, o map[string]any) {
			for _, m := range at(t, o, node...)["volumeMounts"].([]any) {
				if dig(m, "name") == "podmpi" {
					delete(m.(map[string]any), "readOnly")
				}
			}
		}, `want /opt/podmpi read-only`},
		{"podmpi: image volume without its subPath", ctr, func(t *testing.T, o map[string]any) {
			s := at(t, o, node[:len(node)-2]...)
			delete(s, "initContainers")
			s["volumes"].([]any)[0] = map[string]any{"name": "podmpi", "image": map[string]any{"reference": "ghcr.io/podmpi/podmpi:v0.1.0", "pullPolicy": "IfNotPresent"}}
		}, `with subPath "", want "opt/podmpi"`},
		{"podmpi: image volume of another image", ctr, func(t *testing.T, o map[string]any) {
			s := at(t, o, node[:len(node)-2]...)
			delete(s, "initContainers")
			s["volumes"].([]any)[0] = map[string]any{"name": "podmpi", "image": map[string]any{"reference": "ghcr.io/podmpi/openmpi:v0.1.0"}}
		}, `want the binaries-only image <registry>/podmpi`},
		{"run as: the image's user (root in most images)", mpijob, func(t *testing.T, o map[string]any) {
			delete(at(t, o, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "securityContext"), "runAsUser")
		}, `securityContext.runAsUser unset: want a fixed non-root UID`},
		{"run as: a group that cannot read the key", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, append(slices.Clone(launcherPod), "securityContext")...)["runAsGroup"] = json.Number("1000")
		}, `securityContext.runAsGroup 1000: want 0`},
		{"run as: a fixed UID under an OpenShift SCC", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "template", "spec", "replicatedJobs", "[0]", "template", "spec", "template", "metadata", "annotations")["openshift.io/required-scc"] = "restricted-v2"
		}, `runAsUser/runAsGroup set on a pod pinned to OpenShift's restricted-v2`},
		{"Trainer: replicated job name over 20 characters", ctr, func(t *testing.T, o map[string]any) {
			at(t, o, "spec", "template", "spec", "replicatedJobs", "[1]")["name"] = "launcher-of-the-job-0"
		}, `replicatedJobs[1].name "launcher-of-the-job-0": 21 characters; Trainer v2.4 refuses`},
		{"NetworkPolicy: strict core decode", netpol, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["podSelecter"] = map[string]any{}
		}, `unknown field "spec.podSelecter"`},
		{"NetworkPolicy: wrong type", netpol, func(t *testing.T, o map[string]any) {
			at(t, o, "spec")["policyTypes"] = "Ingress"
		}, "as networking.k8s.io/v1, Kind=NetworkPolicy"},
		{"metadata: bad name", netpol, func(t *testing.T, o map[string]any) {
			at(t, o, "metadata")["name"] = "Not_A_Name"
		}, "metadata.name: a lowercase RFC 1123 subdomain"},
		{"metadata: unknown field", netpol, func(t *testing.T, o map[string]any) {
			at(t, o, "metadata")["lables"] = map[string]any{}
		}, `metadata: unknown field "lables"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The unmodified document is clean, so the problem comes from
			// the mutation.
			if errs, _ := checkDocument(tc.doc, crds, runtimes); len(errs) != 0 {
				t.Fatalf("unmodified %s is not clean: %v", tc.doc, errs)
			}
			d := mutate(t, tc.doc, func(o map[string]any) { tc.f(t, o) })
			errs, _ := checkDocument(d, crds, runtimes)
			for _, e := range errs {
				if strings.Contains(e, tc.want) {
					return
				}
			}
			t.Errorf("want a problem containing %q, got %d:\n%s", tc.want, len(errs), strings.Join(errs, "\n"))
		})
	}
}

// TestValidateSchemaKeywords covers the validator on small hand-written
// schemas, keyword by keyword.
func TestValidateSchemaKeywords(t *testing.T) {
	parse := func(s string) *schema {
		t.Helper()
		var sc schema
		if err := json.Unmarshal([]byte(s), &sc); err != nil {
			t.Fatal(err)
		}
		return &sc
	}
	val := func(s string) any {
		t.Helper()
		v, err := decodeJSON([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		schema, value string
		want          string // "" means valid
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, `{"a":"x"}`, ""},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, `{"b":"x"}`, "x.b: unknown field"},
		{`{"type":"object","x-kubernetes-preserve-unknown-fields":true}`, `{"b":{"c":1}}`, ""},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"b":1}`, ""},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"b":"1"}`, "x.b: want integer"},
		{`{"type":"object","additionalProperties":false,"properties":{"a":{}}}`, `{"b":1}`, "unknown field"},
		{`{"type":"object","required":["a"],"properties":{"a":{}}}`, `{}`, "x.a: required field missing"},
		{`{"type":"object","minProperties":1}`, `{}`, "below minProperties"},
		{`{"type":"integer"}`, `1`, ""},
		{`{"type":"integer"}`, `1.5`, "want integer"},
		{`{"type":"number"}`, `1.5`, ""},
		{`{"type":"integer","minimum":1}`, `0`, "below minimum"},
		{`{"type":"string","enum":["a","b"]}`, `"c"`, "is not one of"},
		{`{"type":"string","maxLength":2}`, `"abc"`, "exceeds maxLength"},
		{`{"type":"string","pattern":"^[a-z]+$"}`, `"aB"`, "does not match pattern"},
		{`{"type":"array","items":{"type":"boolean"}}`, `[true,1]`, "x[1]: want boolean"},
		{`{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}}`, `["a","a"]`, "duplicate of [0]"},
		{`{"x-kubernetes-int-or-string":true,"anyOf":[{"type":"integer"},{"type":"string"}]}`, `"50%"`, ""},
		{`{"x-kubernetes-int-or-string":true,"anyOf":[{"type":"integer"},{"type":"string"}]}`, `[]`, "want integer or string"},
		{`{"type":"string"}`, `null`, "null is not allowed"},
		{`{"type":"string","nullable":true}`, `null`, ""},
		{`{"anyOf":[{"minimum":5},{"maximum":1}],"type":"integer"}`, `3`, "none of the anyOf"},
	} {
		errs := validate(parse(tc.schema), "x", val(tc.value))
		if tc.want == "" {
			if len(errs) != 0 {
				t.Errorf("schema %s, value %s: want valid, got %v", tc.schema, tc.value, errs)
			}
			continue
		}
		found := false
		for _, e := range errs {
			if strings.Contains(e, tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("schema %s, value %s: want %q, got %v", tc.schema, tc.value, tc.want, errs)
		}
	}
}
