package cluster

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeProblems(t *testing.T) {
	healthy := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/soft", Effect: corev1.TaintEffectPreferNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		}},
	}
	if p := NodeProblems(&healthy); len(p) != 0 {
		t.Fatalf("a Ready node with a PreferNoSchedule taint: %q, want none", p)
	}
	if err := NodeHealthError(&healthy, DefaultLayout("")); err != nil {
		t.Fatal(err)
	}

	full := *healthy.DeepCopy()
	full.Spec.Taints = append(full.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/disk-pressure", Effect: corev1.TaintEffectNoSchedule})
	full.Status.Conditions[1] = corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue,
		Reason: "KubeletHasDiskPressure", Message: "kubelet has disk pressure"}
	want := []string{
		"DiskPressure=True (KubeletHasDiskPressure kubelet has disk pressure)",
		"taint node.kubernetes.io/disk-pressure:NoSchedule",
	}
	if got := NodeProblems(&full); !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeProblems = %q, want %q", got, want)
	}
	err := NodeHealthError(&full, DefaultLayout(""))
	if err == nil {
		t.Fatal("a disk-pressure node: no error")
	}
	for _, s := range []string{NodeName, "disk-pressure", "0.5 GiB free", "make images-prune", "/var/lib/podmpi-cluster/containerd: "} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}

	down := *healthy.DeepCopy()
	down.Spec.Unschedulable = true
	down.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}
	got := NodeProblems(&down)
	if len(got) != 2 || got[0] != "Ready=Unknown (NodeStatusUnknown)" || !strings.HasPrefix(got[1], "cordoned") {
		t.Fatalf("a cordoned, unreachable node: %q", got)
	}
	if err := NodeHealthError(&down, DefaultLayout("")); err == nil || strings.Contains(err.Error(), "images-prune") {
		t.Fatalf("a node that is not Ready is not a disk problem: %v", err)
	}
}

func TestCheckDisk(t *testing.T) {
	dir := t.TempDir()
	// A folder not made yet counts as the nearest one above it.
	d, err := FreeSpace(filepath.Join(dir, "not", "yet"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Total == 0 || d.Free > d.Total {
		t.Fatalf("FreeSpace = %+v", d)
	}
	if err := checkDisk(0, dir); err != nil {
		t.Fatalf("nothing needed: %v", err)
	}
	err = checkDisk(d.Total+1, dir, filepath.Join(dir, "x"))
	if err == nil {
		t.Fatal("more than the disk holds: no error")
	}
	for _, s := range []string{dir + ": ", filepath.Join(dir, "x") + ": ", "disk-pressure", "make images-prune"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
}
