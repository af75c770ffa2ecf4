package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// jobKey makes an SSH key in the shape Trainer and mpi-operator put in their
// Secret: ECDSA P-521, SEC1 PEM, and its authorized_keys line.
func jobKey(t *testing.T) (priv, pub []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), ssh.MarshalAuthorizedKey(sp)
}

// firstTerminatedLauncher waits until a launcher pod of an MPIJob has
// terminated and returns it.
func firstTerminatedLauncher(t *testing.T, ns, job string, d time.Duration) (corev1.Pod, *corev1.ContainerStateTerminated) {
	t.Helper()
	ctx := ctxT(t, d+time.Minute)
	var pod corev1.Pod
	var st *corev1.ContainerStateTerminated
	waitFor(t, d, "a terminated launcher pod of MPIJob "+job, func() (bool, error) {
		pods, err := podsWith(ctx, ns, "training.kubeflow.org/job-role=launcher,training.kubeflow.org/job-name="+job)
		if err != nil {
			return false, err
		}
		// mpi-operator's launcher restarts (OnFailure): its first end may
		// be the last termination of a container running again.
		for _, p := range pods {
			if len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if t := cs.LastTerminationState.Terminated; t != nil {
				pod, st = p, t
				return true, nil
			}
			if t := cs.State.Terminated; t != nil {
				pod, st = p, t
				return true, nil
			}
		}
		return false, nil
	})
	return pod, st
}

// TestWrongKey: the workers' authorized_keys holds a key other than the
// job's. The launcher must fail the probe (exit 67) and its termination
// message, read with kubectl's jsonpath as users do, must name each worker
// and the auth phase.
func TestWrongKey(t *testing.T) {
	need(t)
	withAndWithoutRBAC(t, "wrongkey", func(t *testing.T, ns string, rbac bool) {
		_, otherPub := jobKey(t)
		if _, err := e.cs.CoreV1().Secrets(ns).Create(ctxT(t, time.Minute), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "other-key"},
			Data:       map[string][]byte{"authorized_keys": otherPub},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		job := mpiJob(t, "openmpi", func(job *unstructured.Unstructured) {
			// The workers keep the job's key as their host key (so the
			// launcher's pin holds) but trust only the other key.
			name := job.GetName()
			spec := "spec.mpiReplicaSpecs.Worker.template.spec"
			path := append(strings.Split(spec, "."), "volumes")
			v, _, _ := unstructured.NestedSlice(job.Object, path...)
			v = append(v, map[string]any{
				"name": "wrong-auth",
				"projected": map[string]any{"sources": []any{
					map[string]any{"secret": map[string]any{"name": name + "-ssh", "items": []any{
						map[string]any{"key": "ssh-privatekey", "path": "id_rsa"},
						map[string]any{"key": "ssh-publickey", "path": "id_rsa.pub"},
					}}},
					map[string]any{"secret": map[string]any{"name": "other-key", "items": []any{
						map[string]any{"key": "authorized_keys", "path": "authorized_keys"},
					}}},
				}},
			})
			setNested(t, job, v, path...)
			cpath := append(strings.Split(spec, "."), "containers")
			cs, _, _ := unstructured.NestedSlice(job.Object, cpath...)
			c := cs[0].(map[string]any)
			mounts, _ := c["volumeMounts"].([]any)
			c["volumeMounts"] = append(mounts, map[string]any{"name": "wrong-auth", "mountPath": "/home/mpiuser/.ssh-wrong", "readOnly": true})
			envs, _ := c["env"].([]any)
			for _, x := range envs {
				if m := x.(map[string]any); m["name"] == "PODMPI_SSH_AUTH_DIR" {
					m["value"] = "/home/mpiuser/.ssh-wrong"
				}
			}
			setNested(t, job, cs, cpath...)
		})
		apply(t, ns, job)
		pod, st := firstTerminatedLauncher(t, ns, job.GetName(), 4*time.Minute)
		// The same field kubectl's jsonpath reads; mpi-operator's launcher Job
		// restarts the container, so read it from the status that showed it
		// terminated rather than from a later one.
		msg := st.Message
		t.Logf("launcher %s exit %d; termination message:\n%s", pod.Name, st.ExitCode, msg)
		if st.ExitCode != 67 {
			t.Errorf("launcher exit %d, want 67 (probe failed)", st.ExitCode)
		}
		for i := 0; i < 2; i++ {
			host := fmt.Sprintf("%s-worker-%d", job.GetName(), i)
			if !strings.Contains(msg, host) {
				t.Errorf("termination message does not name worker %s", host)
			}
		}
		if !strings.Contains(msg, "auth") {
			t.Errorf("termination message does not name the auth phase")
		}
		if rbac {
			describeShows(t, ns, "mpijob", job.GetName(), "ProbeFailedAuth", job.GetName()+"-worker-", "auth", "hint:")
		} else {
			noPodmpiEvents(t, ns, "MPIJob", job.GetName())
		}
	})
}

// TestRankOOM: one rank allocates past its worker's memory limit. The rank
// process itself must be the one killed (exec): a killed child of a shell
// that then goes on would not end the job.
func TestRankOOM(t *testing.T) {
	need(t)
	withAndWithoutRBAC(t, "oom", func(t *testing.T, ns string, rbac bool) {
		job := mpiJob(t, "openmpi", func(job *unstructured.Unstructured) {
			setLauncherArgs(t, job, "mpirun", "-np", "4", "bash", "-c",
				`if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then exec tail < <(head -c 3G /dev/zero); fi; exec podmpi-allreduce`)
		})
		apply(t, ns, job)
		_, st := firstTerminatedLauncher(t, ns, job.GetName(), 4*time.Minute)
		msg := st.Message
		for _, want := range []string{"worker-1", "rank 3", "OOM", "1 GiB"} {
			if !strings.Contains(msg, want) {
				t.Errorf("termination message does not name %q:\n%s", want, msg)
			}
		}
		if rbac {
			describeShows(t, ns, "mpijob", job.GetName(), "OOMKilled", "worker-1", "rank 3", "1 GiB", "hint:")
		} else {
			noPodmpiEvents(t, ns, "MPIJob", job.GetName())
		}
	})
}

// TestWorkerDeletedMidJob: a worker pod is deleted while mpirun runs.
func TestWorkerDeletedMidJob(t *testing.T) {
	need(t)
	withAndWithoutRBAC(t, "deleted", func(t *testing.T, ns string, rbac bool) {
		job := mpiJob(t, "openmpi", func(job *unstructured.Unstructured) {
			setLauncherArgs(t, job, "mpirun", "-np", "4", "sleep", "300")
		})
		apply(t, ns, job)
		ctx := ctxT(t, 5*time.Minute)
		victim := job.GetName() + "-worker-1"
		// Deleted once the ranks run on it (Open MPI starts them after
		// every daemon reported in): a pod deleted while its daemon still
		// calls back to mpirun is a start-up fault ("unable to reliably
		// start one or more daemons"), which this drill is not about (unit
		// tests cover its diagnosis).
		waitFor(t, 3*time.Minute, "the ranks running on "+victim, func() (bool, error) {
			p, err := e.cs.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return hasProcess(t, *p, "sleep"), nil
		})
		deleted := time.Now()
		if err := e.cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		_, st := firstTerminatedLauncher(t, ns, job.GetName(), time.Minute)
		if d := st.FinishedAt.Sub(deleted); d > 30*time.Second {
			t.Errorf("launcher ended %s after the worker was deleted, want at most 30 s", d)
		}
		msg := st.Message
		t.Logf("launcher exit %d, %s after the worker was deleted:\n%s", st.ExitCode, st.FinishedAt.Sub(deleted).Round(time.Second), msg)
		// With the API the launcher knows the pod was deleted. Without it, a
		// younger agent under the name or the name gone from DNS is the
		// proof; before either, it names the worker that stopped answering
		// and says why that may be, never "gone" on a guess.
		named := strings.HasPrefix(msg, "root cause: worker "+victim+".")
		gone := strings.Contains(msg, " is gone: ")
		if !named || rbac && !gone || !gone && !strings.Contains(msg, " did not answer: ") {
			t.Errorf("termination message does not start naming %s as gone (or, without the API, as not answering):\n%s", victim, msg)
		}
		if rbac {
			describeShows(t, ns, "mpijob", job.GetName(), "WorkerGone", victim, "is gone", "hint:")
		} else {
			noPodmpiEvents(t, ns, "MPIJob", job.GetName())
		}
	})
}

func setLauncherArgs(t *testing.T, job *unstructured.Unstructured, args ...string) {
	t.Helper()
	path := []string{"spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers"}
	cs, _, _ := unstructured.NestedSlice(job.Object, path...)
	var a []any
	for _, s := range args {
		a = append(a, s)
	}
	cs[0].(map[string]any)["args"] = a
	setNested(t, job, cs, path...)
}

// TestRotatedSecret: the job's Secret is rotated while a worker runs; the
// kubelet's atomic writer swaps the mounted files, and the worker-agent must
// serve the new key (host key and authorized_keys) without a restart: a
// launcher probe with the new key passes, one with the old key fails.
func TestRotatedSecret(t *testing.T) {
	need(t)
	ns := namespace(t, "rotate", true)
	ctx := ctxT(t, 8*time.Minute)
	privA, pubA := jobKey(t)
	privB, pubB := jobKey(t)
	secret := func(name string, priv, pub []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeSSHAuth,
			Data: map[string][]byte{"ssh-privatekey": priv, "ssh-publickey": pub}}
	}
	for _, s := range []*corev1.Secret{secret("job-key", privA, pubA), secret("old-key", privA, pubA)} {
		if _, err := e.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "rot"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"app": "rot-worker"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	worker := restrictedPod("rot-w0", e.info.Images["openmpi"], "job-key",
		[]string{"worker-agent", "--ssh.listen-address=:2222", "--web.listen-address=:9022"})
	worker.Labels = map[string]string{"app": "rot-worker"}
	worker.Spec.Hostname, worker.Spec.Subdomain = "rot-w0", "rot"
	worker.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, worker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	probe := func(secretName string) (int32, string) {
		n++
		p := restrictedPod(fmt.Sprintf("probe-%d", n), e.info.Images["openmpi"], secretName,
			[]string{"launcher", "--workers=rot-w0.rot", "--discovery.timeout=2m", "--probe.timeout=20s", "probe"})
		if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var st *corev1.ContainerStateTerminated
		waitFor(t, 3*time.Minute, "probe pod "+p.Name, func() (bool, error) {
			var err error
			st, err = terminated(ctx, ns, p.Name)
			return st != nil, err
		})
		msg := st.Message
		if msg == "" {
			msg = lastLines(podLogs(ctx, ns, p.Name, false), 3)
		}
		return st.ExitCode, msg
	}
	if code, msg := probe("job-key"); code != 0 {
		t.Fatalf("probe with the job's key before rotation: exit %d: %s", code, msg)
	}
	rotated := time.Now()
	s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, "job-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["ssh-privatekey"], s.Data["ssh-publickey"] = privB, pubB
	if _, err := e.cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet refreshes a running pod's Secret volume on its next sync
	// of the pod (about a minute); new probe pods mount the new key at once.
	var lastMsg string
	waitFor(t, 4*time.Minute, "a probe with the rotated key to pass", func() (bool, error) {
		code, msg := probe("job-key")
		lastMsg = msg
		return code == 0, nil
	})
	t.Logf("the worker served the rotated key %s after the Secret update (last refusal: %s)", time.Since(rotated).Round(time.Second), lastMsg)
	if code, msg := probe("old-key"); code == 0 {
		t.Errorf("a probe with the old key still passes after the rotation")
	} else {
		t.Logf("old key refused as it should be: exit %d: %s", code, msg)
	}
	if log := podLogs(ctx, ns, "rot-w0", false); !strings.Contains(log, "job key rotated") {
		t.Errorf("the worker did not log the rotation; log:\n%s", lastLines(log, 20))
	}
}

// restrictedPod is a pod that meets the restricted Pod Security Standard,
// with the job Secret mounted as Trainer mounts it.
func restrictedPod(name, image, secret string, command []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "node", Image: image, Command: command,
				Env: []corev1.EnvVar{{Name: "PODMPI_SSH_AUTH_DIR", Value: "/home/mpiuser/.ssh"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ssh", MountPath: "/home/mpiuser/.ssh", ReadOnly: true},
					{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "ssh", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: secret, DefaultMode: ptr.To[int32](0o400),
					Items: []corev1.KeyToPath{
						{Key: "ssh-privatekey", Path: "id_rsa", Mode: ptr.To[int32](0o640)},
						{Key: "ssh-publickey", Path: "id_rsa.pub", Mode: ptr.To[int32](0o644)},
						{Key: "ssh-publickey", Path: "authorized_keys", Mode: ptr.To[int32](0o644)},
					}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

var _ = context.Background

// withAndWithoutRBAC runs a drill twice, each in a namespace of its own:
// with deploy/rbac (the launcher records Events and reads the pods) and
// without (the same diagnosis in the termination message, and no podmpi
// Event).
func withAndWithoutRBAC(t *testing.T, prefix string, drill func(t *testing.T, ns string, rbac bool)) {
	for _, rbac := range []bool{true, false} {
		name := "rbac"
		if !rbac {
			name = "no-rbac"
		}
		t.Run(name, func(t *testing.T) {
			ns := namespace(t, prefix, true)
			if rbac {
				applyRBAC(t, ns)
			}
			drill(t, ns, rbac)
		})
	}
}

// noPodmpiEvents fails when the launcher recorded an Event on kind/name:
// without deploy/rbac it may not.
func noPodmpiEvents(t *testing.T, ns, kind, name string) {
	t.Helper()
	if evs := podmpiEvents(t, ns, kind, name); len(evs) != 0 {
		t.Errorf("podmpi Events without RBAC: %v", evs)
	}
}
