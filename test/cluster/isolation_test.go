package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestIPSetName(t *testing.T) {
	for name, want := range map[string]bool{
		"KUBE-SRC-ABCDEF": true, "KUBE-DST-XYZ": true, "kube-router-local-ips": true,
		"cni-podman0": false, "KUBE-SERVICES": false, "my-set": false,
	} {
		if got := ipsetName(name); got != want {
			t.Errorf("ipsetName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestKueueObjects(t *testing.T) {
	objs, err := decodeObjects([]byte(`apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta2.visibility.kueue.x-k8s.io}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kueue-mutating-webhook-configuration}
webhooks:
- name: mmpijob.kb.io
  rules: [{apiGroups: [kubeflow.org], resources: [mpijobs]}]
- name: mpod.kb.io
  rules: [{apiGroups: [""], resources: [pods]}]
- name: mtrainjob.kb.io
  rules: [{apiGroups: [trainer.kubeflow.org], resources: [trainjobs]}]
- name: mjobset.kb.io
  rules: [{apiGroups: [jobset.x-k8s.io], resources: [jobsets]}]
- name: mresourceflavor.kb.io
  rules: [{apiGroups: [kueue.x-k8s.io], resources: [resourceflavors]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	out := kueueObjects(objs)
	if len(out) != 1 {
		t.Fatalf("kueueObjects kept %d objects, want the webhook configuration only (no APIService)", len(out))
	}
	hooks, _, _ := unstructured.NestedSlice(out[0].Object, "webhooks")
	var names []string
	for _, h := range hooks {
		names = append(names, h.(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, ","); got != "mmpijob.kb.io,mtrainjob.kb.io,mresourceflavor.kb.io" {
		t.Errorf("webhooks kept: %s; want only MPIJob's, TrainJob's and Kueue's own (no pod or JobSet webhook waits on Kueue)", got)
	}
}

func TestSCCPolicy(t *testing.T) {
	objs, err := decodeObjects(SCCPolicy)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		if strings.HasSuffix(o.GetKind(), "Binding") {
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "matchResources", "namespaceSelector", "matchLabels")
			if sel[SCCLabel] != SCCLabelValue {
				t.Errorf("%s selects namespaces by %v, want %s=%s", o.GetKind(), sel, SCCLabel, SCCLabelValue)
			}
		}
	}
	for _, k := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if !kinds[k] {
			t.Errorf("scc/restricted-v2.yaml has no %s", k)
		}
	}
	for _, a := range []string{SCCUIDRange, SCCSupplementalGID} {
		if !strings.Contains(string(SCCPolicy), "'"+a+"'") {
			t.Errorf("the policies do not read the annotation %s", a)
		}
	}
}

func TestBuildsSideBySide(t *testing.T) {
	c := &Cluster{Log: &lockedWriter{}}
	var running, most atomic.Int32
	step := func(name string, err error) buildStep {
		return buildStep{name: name, run: func(context.Context) error {
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
			running.Add(-1)
			return err
		}}
	}
	boom := errors.New("boom")
	b := c.startBuilds(context.Background(), 2, []buildStep{step("a", nil), step("b", boom), step("c", nil), step("d", nil)})
	if err := b.wait(context.Background(), "a", "c", "d"); err != nil {
		t.Fatalf("wait a, c, d: %v", err)
	}
	if err := b.wait(context.Background(), "b"); err == nil || !strings.Contains(err.Error(), "b: boom") {
		t.Errorf("wait b = %v, want it to name b and its error", err)
	}
	if err := b.wait(context.Background(), "nope"); err == nil {
		t.Error("wait on an unknown step: want an error")
	}
	if m := most.Load(); m != 2 {
		t.Errorf("%d builds ran at once, want the 2 lanes", m)
	}
	times := c.times.snapshot()
	if _, ok := times["build a"]; !ok || len(times) != 4 {
		t.Errorf("step times %v: want all four builds timed", times)
	}
}

func TestParallelJoinsErrors(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	err := parallel(func() error { return e1 }, func() error { return nil }, func() error { return e2 })
	if !errors.Is(err, e1) || !errors.Is(err, e2) {
		t.Errorf("parallel = %v, want both errors", err)
	}
	if err := parallel(); err != nil {
		t.Errorf("parallel() = %v", err)
	}
}

// lockedWriter is a log that concurrent steps may write to (os.Stderr is).
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
