// Package kubetest is test support for the users of package kube: kube.Core
// over client-go's typed core/v1 client, so that tests drive the launcher's
// Kubernetes view with client-go's fake clientset. Import it from _test.go
// files only: it links the typed clientset, which package kube leaves out of
// the launcher binary.
package kubetest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/podmpi/podmpi/agent/kube"
)

// Core is kube.Core over c (a fake clientset's CoreV1()).
func Core(c corev1client.CoreV1Interface) kube.Core { return typed{c} }

type typed struct{ c corev1client.CoreV1Interface }

func (t typed) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return t.c.Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

func (t typed) ListPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	return t.c.Pods(ns).List(ctx, opts)
}

func (t typed) ListEvents(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.EventList, error) {
	return t.c.Events(ns).List(ctx, opts)
}

func (t typed) CreateEvent(ctx context.Context, ns string, ev *corev1.Event) (*corev1.Event, error) {
	return t.c.Events(ns).Create(ctx, ev, metav1.CreateOptions{})
}

func (t typed) PatchEvent(ctx context.Context, ns, name string, patch []byte) (*corev1.Event, error) {
	return t.c.Events(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}
