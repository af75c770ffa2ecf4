package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodState is what the API says of one pod of the job.
type PodState struct {
	Name     string
	Hostname string // spec.hostname, else the pod's name: the first label of its hostfile entry
	UID      types.UID
	Node     string
	Phase    corev1.PodPhase
	Ready    bool
	Deleting bool
	// Disrupted is the DisruptionTarget condition's reason and message
	// (evicted, preempted, the node drained or lost), "" without one.
	Disrupted string
	// Restarts is the sum of its containers' restart counts, and
	// LastEnd how the last restarted one ended ("OOMKilled, exit 137").
	Restarts int32
	LastEnd  string
	// Started: one of its containers (an init container too: a sidecar
	// runs through the pod's Pending phase) runs or has run.
	Started bool
	// Why says, in one sentence that follows the pod's name, why it is
	// not running and ready (or what happened to it); "" when it runs and
	// is ready and nothing happened to it. Hint is the fix for the usual
	// reasons, "" for the others.
	Why  string
	Hint string
}

// hints are the fixes of the reasons a worker's pod does not come up.
var hints = map[string]string{
	"Unschedulable":              "no node has room for the pod's requests: lower them (resources.requests), add nodes, or free quota; kubectl describe pod shows the scheduler's reasons",
	"ErrImagePull":               "the image cannot be pulled: check the image name and tag and the registry's pull secret (imagePullSecrets)",
	"ImagePullBackOff":           "the image cannot be pulled: check the image name and tag and the registry's pull secret (imagePullSecrets)",
	"InvalidImageName":           "the image name is not valid: fix the image of the runtime or MPIJob",
	"CrashLoopBackOff":           "its container exits again and again: kubectl logs --previous for the pod says why",
	"CreateContainerConfigError": "a Secret or ConfigMap the pod mounts or reads is missing: kubectl describe pod names it",
	"OOMKilled":                  "its container used more memory than its limit: raise resources.limits.memory",
}

// Describe reads a pod.
func Describe(p *corev1.Pod) PodState {
	s := PodState{Name: p.Name, Hostname: p.Spec.Hostname, UID: p.UID, Node: p.Spec.NodeName, Phase: p.Status.Phase,
		Deleting: p.DeletionTimestamp != nil}
	if s.Hostname == "" {
		s.Hostname = p.Name
	}
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			s.Ready = c.Status == corev1.ConditionTrue
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			s.Disrupted = joinReason(c.Reason, c.Message)
		}
	}
	var waiting []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		s.Restarts += cs.RestartCount
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			s.Started = true
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount > 0 {
			s.LastEnd = fmt.Sprintf("%s, exit %d", orDefault(t.Reason, "Error"), t.ExitCode)
			s.Hint = hints[t.Reason]
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			waiting = append(waiting, fmt.Sprintf("container %s %s", cs.Name, joinReason(w.Reason, w.Message)))
			if h := hints[w.Reason]; h != "" {
				s.Hint = h
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && hints[c.Reason] != "" {
			s.Hint = hints[c.Reason]
		}
	}
	switch {
	case s.Deleting:
		s.Why = "is being deleted"
		if s.Disrupted != "" {
			s.Why += " (" + s.Disrupted + ")"
		}
	case s.Disrupted != "":
		s.Why = "is being disrupted: " + s.Disrupted
	case p.Status.Phase == corev1.PodFailed:
		s.Why = "has failed"
		if r := joinReason(p.Status.Reason, p.Status.Message); r != "" {
			s.Why += ": " + r
		}
	case p.Status.Phase == corev1.PodSucceeded:
		s.Why = "has already ended (Succeeded)"
	case len(waiting) > 0:
		s.Why = "is " + string(orPhase(p.Status.Phase)) + ": " + strings.Join(waiting, "; ")
		if s.LastEnd != "" {
			s.Why += fmt.Sprintf(" (restarted %d times, last %s)", s.Restarts, s.LastEnd)
		}
	case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
		s.Why = "is Pending"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				s.Why += ", not scheduled: " + joinReason(c.Reason, c.Message)
			}
		}
	case s.Restarts > 0:
		s.Why = fmt.Sprintf("restarted %d times (last %s)", s.Restarts, s.LastEnd)
	case !s.Ready:
		s.Why = "is Running but not Ready"
	}
	return s
}

func joinReason(reason, message string) string {
	switch {
	case reason == "":
		return strings.TrimSpace(message)
	case strings.TrimSpace(message) == "":
		return reason
	}
	return reason + ": " + strings.TrimSpace(message)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orPhase(p corev1.PodPhase) corev1.PodPhase {
	if p == "" {
		return corev1.PodPending
	}
	return p
}

// Pods is the job's pods as the API listed them, by host name.
type Pods struct {
	At     time.Time
	ByHost map[string]PodState
}

// For returns the state of the pod a hostfile entry names (its first DNS
// label is the pod's host name), and whether there is one.
func (ps Pods) For(host string) (PodState, bool) {
	label, _, _ := strings.Cut(strings.ToLower(strings.TrimSuffix(host, ".")), ".")
	s, ok := ps.ByHost[label]
	return s, ok
}

// Pods lists the job's pods (the label its operator gives them, found by
// Resolve). ok is false when the client cannot list them (no client, no
// job label, refused).
func (c *Client) Pods(ctx context.Context) (Pods, bool) {
	if c == nil {
		return Pods{}, false
	}
	if err := c.Resolve(ctx); err != nil {
		return Pods{}, false
	}
	c.mu.Lock()
	sel := c.selector
	c.mu.Unlock()
	if sel == "" {
		return Pods{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	list, err := c.core.ListPods(ctx, c.ns, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		c.mu.Lock()
		_ = c.explain("list pods", err)
		c.mu.Unlock()
		c.log.Debug("listing the job's pods", "selector", sel, "err", err)
		return Pods{}, false
	}
	out := Pods{At: time.Now(), ByHost: make(map[string]PodState, len(list.Items))}
	// Newest last, so that a replacement's state wins over the pod it
	// replaces (both can exist while the old one terminates).
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool { return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp) })
	for i := range items {
		s := Describe(&items[i])
		out.ByHost[strings.ToLower(s.Hostname)] = s
	}
	return out, true
}

// GoneAtFirstSight says whether, and why, the pod that ran a worker's
// daemon is gone for sure when the API's first word on the worker's name
// came only after mpirun started (the launcher can start mpirun before its
// first list of the pods): cur is being deleted, was evicted or preempted,
// or failed; or, when the worker-agent under that name is known to have
// answered before mpirun (up), cur is Pending with no container started
// yet: a new pod under the name, made after the one that answered was
// deleted (a pod Pending with a container running, a sidecar through its
// init phase, may be the one that answered, and is not proof).
func GoneAtFirstSight(cur PodState, up bool) (string, bool) {
	switch {
	case cur.Deleting || cur.Disrupted != "" || cur.Phase == corev1.PodFailed:
		return fmt.Sprintf("its pod %s %s", cur.Name, cur.Why), true
	case up && cur.Phase == corev1.PodPending && !cur.Started:
		return fmt.Sprintf("the pod under its name, %s, is Pending: a new pod, made after the one whose worker-agent answered before mpirun was deleted", cur.Name), true
	}
	return "", false
}

// Gone says whether, and why, the pod that ran a worker's daemon (before,
// seen when mpirun started) is gone for sure by what the API says now: no
// pod under its name, another pod (a new uid), deleted, evicted or
// preempted, failed, or its container restarted (the daemon's process went
// with it). A node that is NotReady is not proof: its pods may run on.
func Gone(before PodState, now Pods) (string, bool) {
	cur, ok := now.ByHost[strings.ToLower(before.Hostname)]
	switch {
	case !ok:
		return fmt.Sprintf("its pod %s no longer exists (deleted)", before.Name), true
	case cur.UID != before.UID:
		return fmt.Sprintf("its pod %s was replaced by %s (deleted and recreated)", before.Name, cur.Name), true
	case cur.Deleting || cur.Disrupted != "" || cur.Phase == corev1.PodFailed:
		return fmt.Sprintf("its pod %s %s", cur.Name, cur.Why), true
	case cur.Restarts > before.Restarts:
		return fmt.Sprintf("its pod %s's container restarted (%s)", cur.Name, cur.LastEnd), true
	}
	return "", false
}

// WhyRestarted is what the kubelet said when it last killed a container of
// the pod (its "Killing" Event, such as "Container node failed liveness
// probe, will be restarted"), "" when the Events do not say (or may not be
// listed).
func (c *Client) WhyRestarted(ctx context.Context, pod string) string {
	if c == nil || pod == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	list, err := c.core.ListEvents(ctx, c.ns, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		c.mu.Lock()
		_ = c.explain("list events", err)
		c.mu.Unlock()
		return ""
	}
	var last corev1.Event
	for _, e := range list.Items {
		if e.Reason == "Killing" && !e.LastTimestamp.Before(&last.LastTimestamp) {
			last = e
		}
	}
	return strings.TrimSpace(last.Message)
}

// IsSelf reports whether s is the launcher's own pod.
func (c *Client) IsSelf(s PodState) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.self != nil && c.self.UID == s.UID
}
