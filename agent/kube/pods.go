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
	// Restarts are its containers that have restarted, in the pod's order
	// (init containers first: a native sidecar is one). A restart is what
	// the kubelet did to one container, and no proof about the
	// worker-agent: a sidecar (istio-proxy, a log shipper) restarts alone,
	// and the agent's own start time (its /events) says whether it
	// restarted. They are for messages.
	Restarts []Restart
	// Started: one of the containers that may run a worker-agent runs or
	// has run: its containers and its init containers but those the spec
	// shows as regular ones. A native sidecar (restartPolicy Always) serves
	// through the pod's Pending phase; a regular init container runs to its
	// end before the others start and serves nothing (podmpi's own, which
	// copies /opt/podmpi for the worker-agent, is one), so a new pod that is
	// through it has started nothing of a worker.
	Started bool
	// Why says, in one sentence that follows the pod's name, why it is
	// not running and ready (or what happened to it); "" when it runs and
	// is ready and nothing happened to it. Hint is the fix for the usual
	// reasons, "" for the others.
	Why  string
	Hint string
	// Reason is the trouble Why tells, in one word that stays the same
	// while the trouble lasts (Why's counts and messages change): the
	// Kubernetes reason where there is one (Unschedulable, ErrImagePull,
	// CrashLoopBackOff; ImagePullBackOff, the same trouble between two
	// pulls, is ErrImagePull), else Deleting, Disrupted, Failed,
	// Succeeded, Pending, Restarted or NotReady; "" with Why.
	Reason string
}

// sameTrouble maps a container's waiting reason to the one it alternates
// with while the same trouble lasts.
var sameTrouble = map[string]string{"ImagePullBackOff": "ErrImagePull"}

// Restart is one container of a pod that has restarted.
type Restart struct {
	Container string
	// Agent: the container is the one that runs the worker-agent by the
	// operators' conventions (Trainer's node, else the pod's first
	// container, as mpi-operator has it).
	Agent bool
	Count int32
	// LastEnd is how it last ended ("OOMKilled, exit 137").
	LastEnd string
}

func (r Restart) String() string {
	return fmt.Sprintf("container %s restarted %d times (last %s)", r.Container, r.Count, r.LastEnd)
}

// AgentContainer is the name of the container of p that runs the
// worker-agent by the operators' conventions: Trainer's runtimes name it
// node (its MPI plugin sets up only a container of that name), and
// mpi-operator's is the first container (where it mounts the SSH Secret);
// "" when p has no containers.
func AgentContainer(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "node" {
			return c.Name
		}
	}
	if len(p.Spec.Containers) > 0 {
		return p.Spec.Containers[0].Name
	}
	return ""
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

// regularInitContainers are the init containers of p's spec that are not
// native sidecars (no restartPolicy Always): each runs to its end before the
// next starts.
func regularInitContainers(p *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			out[c.Name] = true
		}
	}
	return out
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
	waitingReason := ""
	agent := AgentContainer(p)
	inits := len(p.Status.InitContainerStatuses)
	regular := regularInitContainers(p)
	for i, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		mayServe := i >= inits || !regular[cs.Name]
		if mayServe && (cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil) {
			s.Started = true
		}
		var r *Restart
		if cs.RestartCount > 0 {
			s.Restarts = append(s.Restarts, Restart{Container: cs.Name, Agent: i >= inits && cs.Name == agent, Count: cs.RestartCount, LastEnd: "Error"})
			r = &s.Restarts[len(s.Restarts)-1]
			if t := cs.LastTerminationState.Terminated; t != nil {
				r.LastEnd = fmt.Sprintf("%s, exit %d", orDefault(t.Reason, "Error"), t.ExitCode)
				s.Hint = hints[t.Reason]
			}
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			entry := fmt.Sprintf("container %s %s", cs.Name, joinReason(w.Reason, w.Message))
			if r != nil {
				entry += fmt.Sprintf(" (restarted %d times, last %s)", r.Count, r.LastEnd)
			}
			waiting = append(waiting, entry)
			if waitingReason == "" {
				waitingReason = orDefault(sameTrouble[w.Reason], w.Reason)
			}
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
		s.Why, s.Reason = "is being deleted", "Deleting"
		if s.Disrupted != "" {
			s.Why += " (" + s.Disrupted + ")"
		}
	case s.Disrupted != "":
		s.Why, s.Reason = "is being disrupted: "+s.Disrupted, "Disrupted"
	case p.Status.Phase == corev1.PodFailed:
		s.Why, s.Reason = "has failed", "Failed"
		if r := joinReason(p.Status.Reason, p.Status.Message); r != "" {
			s.Why += ": " + r
		}
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				// What the container said as it ended (worker-agent's
				// exit 75 names the image's missing glibc), one line.
				s.Why += fmt.Sprintf("; container %s %s, exit %d", cs.Name, orDefault(t.Reason, "Error"), t.ExitCode)
				if m := firstLine(t.Message, 300); m != "" {
					s.Why += ": " + m
				}
				break
			}
		}
	case p.Status.Phase == corev1.PodSucceeded:
		s.Why, s.Reason = "has already ended (Succeeded)", "Succeeded"
	case len(waiting) > 0:
		s.Why, s.Reason = "is "+string(orPhase(p.Status.Phase))+": "+strings.Join(waiting, "; "), waitingReason
	case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
		s.Why, s.Reason = "is Pending", "Pending"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				s.Why += ", not scheduled: " + joinReason(c.Reason, c.Message)
				s.Reason = orDefault(c.Reason, s.Reason)
			}
		}
	case len(s.Restarts) > 0:
		rs := make([]string, len(s.Restarts))
		for i, r := range s.Restarts {
			rs[i] = r.String()
		}
		ready := "and Ready"
		if !s.Ready {
			ready = "but not Ready"
		}
		s.Why, s.Reason = fmt.Sprintf("is %s %s: %s", orPhase(p.Status.Phase), ready, strings.Join(rs, "; ")), "Restarted"
	case !s.Ready:
		s.Why, s.Reason = "is Running but not Ready", "NotReady"
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
	s, ok := ps.ByHost[HostLabel(host)]
	return s, ok
}

// HostLabel is the first DNS label of a host name (a hostfile entry such
// as tj-node-0-1.tj, or an FQDN), lower case: the pod's host name, the key
// of Pods.ByHost.
func HostLabel(host string) string {
	label, _, _ := strings.Cut(strings.ToLower(strings.TrimSuffix(host, ".")), ".")
	return label
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
		_ = c.explain("list pods", err)
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

// PodEndedAtFirstList says whether, and why, the API's first word on a
// worker's pod, which came only after mpirun started (the launcher can
// start mpirun before its first list of the pods), shows that the pod
// that ran the worker's daemon has ended or is ending: cur is being
// deleted, evicted or preempted, or failed; or, when the worker-agent
// under that name is known to have answered before mpirun (agentUp), cur
// is Pending with no container started yet: a new pod under the name,
// made after the one that answered was deleted (a pod Pending with a
// container running, a sidecar through its init phase, may be the one
// that answered, and is not proof).
func PodEndedAtFirstList(cur PodState, agentUp bool) (string, bool) {
	switch {
	case cur.Deleting || cur.Disrupted != "" || cur.Phase == corev1.PodFailed:
		return fmt.Sprintf("its pod %s %s", cur.Name, cur.Why), true
	case agentUp && cur.Phase == corev1.PodPending && !cur.Started:
		return fmt.Sprintf("the pod under its name, %s, is Pending: a new pod, made after the one whose worker-agent answered before mpirun was deleted", cur.Name), true
	}
	return "", false
}

// PodEnded says whether, and why, the pod that ran a worker's daemon
// (first, as the API showed it while mpirun ran) has ended or is ending by
// what the API says now: no pod under its name (deleted), another pod (a
// new uid: deleted and recreated), being deleted, evicted or preempted, or
// failed. A restart of one of its containers is not: a sidecar restarts
// alone, and whether the worker-agent itself restarted is for its own
// start time to say. A node that is NotReady is not either: its pods may
// run on.
func PodEnded(first PodState, now Pods) (string, bool) {
	cur, ok := now.ByHost[strings.ToLower(first.Hostname)]
	switch {
	case !ok:
		return fmt.Sprintf("its pod %s no longer exists (deleted)", first.Name), true
	case cur.UID != first.UID:
		return fmt.Sprintf("its pod %s was replaced by %s (deleted and recreated)", first.Name, cur.Name), true
	case cur.Deleting || cur.Disrupted != "" || cur.Phase == corev1.PodFailed:
		return fmt.Sprintf("its pod %s %s", cur.Name, cur.Why), true
	}
	return "", false
}

// RestartedSince lists the containers of the pod first shows that have
// restarted since (more often than first counted), the same pod (uid) in
// now; none when it is another pod or gone.
func RestartedSince(first PodState, now Pods) []Restart {
	cur, ok := now.ByHost[strings.ToLower(first.Hostname)]
	if !ok || cur.UID != first.UID {
		return nil
	}
	var out []Restart
	for _, r := range cur.Restarts {
		before := int32(0)
		for _, b := range first.Restarts {
			if b.Container == r.Container {
				before = b.Count
			}
		}
		if r.Count > before {
			out = append(out, r)
		}
	}
	return out
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
		_ = c.explain("list events", err)
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

// firstLine is the first non-empty line of a container's termination
// message, cut at max bytes.
func firstLine(msg string, max int) string {
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > max {
				l = l[:max] + "..."
			}
			return l
		}
	}
	return ""
}
