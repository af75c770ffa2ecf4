package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// Core is the part of the core/v1 API the launcher uses: pods (its own,
// and the job's), a pod's Events, and the Events it writes.
type Core interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error)
	CreateEvent(ctx context.Context, namespace string, ev *corev1.Event) (*corev1.Event, error)
	// PatchEvent applies a strategic merge patch (what client-go's event
	// correlator makes) to the Event name.
	PatchEvent(ctx context.Context, namespace, name string, patch []byte) (*corev1.Event, error)
}

// restCore is Core over a REST client of core/v1 that knows core/v1's
// types alone. client-go's typed clientset is the same requests, but it
// registers every API group at the start of every process that links it
// (56 groups: about 7 MB of the launcher pod's memory and 10 MB of binary,
// for the five calls here).
type restCore struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

// newRESTCore makes a Core of cfg (the in-cluster configuration), set up
// as client-go's typed core/v1 client sets its own.
func newRESTCore(cfg *rest.Config) (Core, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil { // with metav1's options and Status
		return nil, fmt.Errorf("core/v1 types: %w", err)
	}
	c := rest.CopyConfig(cfg)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &restCore{rc: rc, params: runtime.NewParameterCodec(scheme)}, nil
}

func (c *restCore) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rc.Get().Namespace(namespace).Resource("pods").Name(name).
		VersionedParams(&metav1.GetOptions{}, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *restCore) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := c.rc.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *restCore) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	err := c.rc.Get().Namespace(namespace).Resource("events").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *restCore) CreateEvent(ctx context.Context, namespace string, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rc.Post().Namespace(namespace).Resource("events").
		VersionedParams(&metav1.CreateOptions{}, c.params).Body(ev).Do(ctx).Into(out)
	return out, err
}

func (c *restCore) PatchEvent(ctx context.Context, namespace, name string, patch []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rc.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("events").Name(name).
		VersionedParams(&metav1.PatchOptions{}, c.params).Body(patch).Do(ctx).Into(out)
	return out, err
}
