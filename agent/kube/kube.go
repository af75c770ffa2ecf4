// Package kube is what the launcher learns from, and tells, the Kubernetes
// API when its pod may use it: Events on the TrainJob or MPIJob (and on
// its own pod) where kubectl describe and the Kubeflow SDK show them, and
// the state of the job's pods (Pending and why, image pull errors, restarts,
// deletion, eviction) for the launcher's waits and its diagnosis.
//
// Everything here is optional. Without a service-account token (outside
// Kubernetes, docker-compose, a pod with automountServiceAccountToken
// false), with --kube.api off, or without the RBAC of deploy/rbac (403),
// Connect or the calls say so once and the launcher works as it would
// without the API. Every request has a deadline (Options.Timeout), and
// nothing here is on the path to mpirun beyond one bounded lookup.
//
// It uses client-go: the in-cluster configuration, a REST client of
// core/v1 for pods and Events (Core; not client-go's typed clientset, which
// registers every API group in every process that links it), the metadata
// client for the owning object's uid (a TrainJob, MPIJob or JobSet: only
// its metadata is read), and client-go's event correlator for aggregation
// and rate limits.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Modes of Options.Mode.
const (
	ModeAuto = "auto" // use the in-cluster API when a service-account token is mounted
	ModeOff  = "off"  // never
)

// DefaultTimeout bounds each API request.
const DefaultTimeout = 3 * time.Second

// ReportingComponent is the Events' source and reporting controller.
const ReportingComponent = "podmpi-launcher"

// Labels that name the job a pod belongs to.
const (
	// LabelJobSetName is set by JobSet (and so Trainer v2) on every pod of
	// a JobSet; a TrainJob's JobSet has the TrainJob's name.
	LabelJobSetName = "jobset.sigs.k8s.io/jobset-name"
	// LabelMPIJobName is set by mpi-operator on the pods of an MPIJob.
	LabelMPIJobName = "training.kubeflow.org/job-name"
)

// The owning objects the launcher posts its Events on.
var (
	TrainJobs = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	MPIJobs   = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}
	JobSets   = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
)

// Options configures Connect.
type Options struct {
	// Mode is ModeAuto ("" too) or ModeOff.
	Mode string
	// PodName and PodUID are the launcher's own pod (downward API); when
	// PodName is empty the pod is found by this host's IP address.
	PodName, PodUID string
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent names the launcher to the API server.
	UserAgent string
	Logger    *slog.Logger

	// Tests set these instead of the in-cluster configuration.
	Core      Core
	Metadata  metadata.Interface
	Namespace string
}

// Client is the launcher's view of the API. Its methods are safe for
// concurrent use; a nil *Client does nothing (see Connect).
type Client struct {
	core    Core
	meta    metadata.Interface
	ns      string
	timeout time.Duration
	log     *slog.Logger
	podName string
	podUID  string
	events  *recorder

	// resolving makes one Resolve attempt at a time, its requests made
	// without mu.
	resolving sync.Mutex

	mu         sync.Mutex
	resolved   bool                    // Resolve learned what it could, or failed for good
	resolveErr error                   // why it failed for good
	self       *corev1.ObjectReference // the launcher's pod
	job        *corev1.ObjectReference // the TrainJob, MPIJob or JobSet
	selector   string                  // the job's pods
	denied     map[string]bool         // what RBAC refused, said once each
}

// Connect returns a client of the in-cluster API, or nil and why the
// launcher cannot see the API (for one INFO line).
func Connect(opts Options) (*Client, string) {
	if strings.EqualFold(strings.TrimSpace(opts.Mode), ModeOff) {
		return nil, "the Kubernetes API is not used (--kube.api off)"
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{core: opts.Core, meta: opts.Metadata, ns: opts.Namespace, timeout: timeout, log: log,
		podName: opts.PodName, podUID: opts.PodUID, denied: map[string]bool{}}
	if c.core == nil {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			if errors.Is(err, rest.ErrNotInCluster) {
				return nil, "not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST): Events and pod states are not available"
			}
			return nil, "no service-account token in this pod (" + err.Error() + "): Events on the job and what Kubernetes knows of its pods are not " +
				"available; apply deploy/rbac in the job's namespace and let the launcher automount a token to have them"
		}
		cfg.Timeout = timeout
		cfg.QPS, cfg.Burst = 5, 10
		cfg.UserAgent = opts.UserAgent
		core, err := newRESTCore(cfg)
		if err != nil {
			return nil, "the Kubernetes API client: " + err.Error()
		}
		meta, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, "the Kubernetes API client: " + err.Error()
		}
		c.core, c.meta = core, meta
		if c.ns == "" {
			b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
			if err != nil {
				return nil, "the pod's namespace: " + err.Error()
			}
			c.ns = strings.TrimSpace(string(b))
		}
	}
	c.events = newRecorder(c)
	return c, ""
}

// Namespace is the launcher's namespace.
func (c *Client) Namespace() string {
	if c == nil {
		return ""
	}
	return c.ns
}

// Resolve learns the launcher's own pod and the object that owns the job
// (a TrainJob, else a JobSet; an MPIJob). Once it has learned them, or
// failed for good (RBAC refused, the pod does not exist), later calls
// return what the first said at once; after a transient failure (no
// answer, a 5xx: see Transient) the next call asks again. Each request is
// bounded by the client's timeout.
func (c *Client) Resolve(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.resolving.Lock()
	defer c.resolving.Unlock()
	c.mu.Lock()
	done, err := c.resolved, c.resolveErr
	c.mu.Unlock()
	if done {
		return err
	}
	self, job, selector, err := c.learn(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case self != nil:
		c.self = self
	case c.podName != "" && c.podUID != "":
		// The downward API named the pod: its own Events still work.
		c.self = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.ns, Name: c.podName, UID: types.UID(c.podUID)}
	}
	c.job, c.selector = job, selector
	if err != nil && Transient(err) {
		return err
	}
	c.resolved, c.resolveErr = true, err
	return err
}

// learn asks the API for what Resolve learns: the launcher's pod (nil when
// it could not be read), the job's object (nil when unknown) and the label
// selector of the job's pods.
func (c *Client) learn(ctx context.Context) (self, job *corev1.ObjectReference, selector string, err error) {
	pod, err := c.ownPod(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	self = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	switch {
	case pod.Labels[LabelJobSetName] != "":
		name := pod.Labels[LabelJobSetName]
		selector = LabelJobSetName + "=" + name
		// A TrainJob owns a JobSet of its name: the JobSet is asked only
		// when no TrainJob is there for sure.
		job, err := c.jobRef(ctx, "TrainJob", TrainJobs, name)
		if job != nil || Transient(err) {
			return self, job, selector, err
		}
		job, err2 := c.jobRef(ctx, "JobSet", JobSets, name)
		if job != nil || Transient(err2) {
			return self, job, selector, err2
		}
		c.log.Info("the launcher's TrainJob or JobSet is unknown; Events go on its own pod only", "jobset", name, "trainjob_err", err, "jobset_err", err2)
	case pod.Labels[LabelMPIJobName] != "":
		name := pod.Labels[LabelMPIJobName]
		selector = LabelMPIJobName + "=" + name
		job, err := c.jobRef(ctx, "MPIJob", MPIJobs, name)
		if job != nil || Transient(err) {
			return self, job, selector, err
		}
		c.log.Info("the launcher's MPIJob is unknown; Events go on its own pod only", "mpijob", name, "err", err)
	}
	return self, nil, selector, nil
}

// Transient reports whether err, from a request to the API, may well go
// away when the request is made again: no answer in time, a connection
// refused or reset (an API server restarting), a 5xx, 429 Too Many
// Requests. RBAC's refusal (403), a bad token (401), an object or a kind
// that does not exist (404) and a request the server rejects (400, 422)
// will not.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsNotFound(err), apierrors.IsBadRequest(err),
		apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		return false
	}
	return true
}

// Job is the object the job's Events go on (nil until Resolve found one).
func (c *Client) Job() *corev1.ObjectReference {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.job
}

// ownPod finds the launcher's pod: by name, else by this host's address.
func (c *Client) ownPod(ctx context.Context) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.podName != "" {
		p, err := c.core.GetPod(ctx, c.ns, c.podName)
		if err != nil {
			return nil, c.explain("get pods", err)
		}
		return p, nil
	}
	ips := localIPs()
	for _, ip := range ips {
		list, err := c.core.ListPods(ctx, c.ns, metav1.ListOptions{FieldSelector: "status.podIP=" + ip})
		if err != nil {
			return nil, c.explain("list pods", err)
		}
		if len(list.Items) == 1 {
			return &list.Items[0], nil
		}
	}
	return nil, fmt.Errorf("no pod in namespace %s has this pod's address %v (set PODMPI_KUBE_POD_NAME from the downward API)", c.ns, ips)
}

// jobRef is the reference to the object of kind (of gvr) name in the
// namespace, by its uid; nil and why when it cannot be read.
func (c *Client) jobRef(ctx context.Context, kind string, gvr schema.GroupVersionResource, name string) (*corev1.ObjectReference, error) {
	uid, err := c.uidOf(ctx, gvr, name)
	if err != nil {
		return nil, err
	}
	return &corev1.ObjectReference{Kind: kind, APIVersion: gvr.GroupVersion().String(), Namespace: c.ns, Name: name, UID: uid}, nil
}

// uidOf reads only the metadata of one object of gvr in the namespace.
func (c *Client) uidOf(ctx context.Context, gvr schema.GroupVersionResource, name string) (uid types.UID, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m, err := c.meta.Resource(gvr).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", c.explain("get "+gvr.Resource, err)
	}
	return m.UID, nil
}

// explain turns an API error into one that says what to do, and logs a
// refusal by RBAC once per verb. c.mu must not be held.
func (c *Client) explain(verb string, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if apierrors.IsForbidden(err) {
		if !c.denied[verb] {
			c.denied[verb] = true
			c.log.Info("the launcher may not "+verb+" (RBAC); apply deploy/rbac in this namespace for Events and pod states",
				"namespace", c.ns)
		}
		return fmt.Errorf("%s: forbidden by RBAC: %w", verb, err)
	}
	return fmt.Errorf("%s: %w", verb, err)
}

// localIPs are this host's non-loopback addresses.
func localIPs() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP.String())
		}
	}
	return out
}
