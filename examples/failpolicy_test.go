package examples

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// A launcher fails once and keeps its evidence. podmpi's launcher exits with
// a code that names a deterministic failure (its own 64-74, or mpirun's code
// passed through): running it again reaches the same end. So every shipped
// launcher runs with restartPolicy Never, whose failed pod the Job controller
// keeps (termination message and log included) until its owner goes, and its
// Job fails at the first such exit. Kubernetes' defaults do the opposite
// under both operators: JobSet and mpi-operator default the launcher to
// OnFailure, which restarts the container in place up to backoffLimit (6)
// times and then deletes the pod.

// launcherBackoffLimitMax bounds a Trainer launcher job's backoffLimit: it
// counts only failures neither podFailurePolicy rule matches (a pod the
// kubelet refused before its container ran has no exit code), and the
// default of 6 would retry those with growing delays for minutes.
const launcherBackoffLimitMax = 3

// disruptionTarget is the pod condition Kubernetes sets on a pod it ends for
// reasons outside the job: eviction, preemption, a node drain or shutdown,
// taint-based deletion, garbage collection of a pod on a lost node.
const disruptionTarget = corev1.DisruptionTarget

// trainerLauncherFailureProblems checks the launcher replicated job of a
// (Cluster)TrainingRuntime: restartPolicy Never, backoffLimit set and small,
// and podFailurePolicy rules in this order: Ignore a pod with the
// DisruptionTarget condition (the Job makes a new one and does not count
// it), then FailJob on any non-zero exit of the launcher's container.
func trainerLauncherFailureProblems(d document) []string {
	rjs, _ := dig(d.Obj, "spec", "template", "spec", "replicatedJobs").([]any)
	for i, rj := range rjs {
		if dig(rj, "name") != "launcher" {
			continue
		}
		where := fmt.Sprintf("spec.template.spec.replicatedJobs[%d] (launcher)", i)
		raw, err := yaml.Marshal(dig(rj, "template", "spec"))
		if err != nil {
			return []string{where + ": " + err.Error()}
		}
		var js batchv1.JobSpec
		if err := strictYAML(raw, &js); err != nil {
			return []string{where + ".template.spec: as a batch/v1 JobSpec: " + err.Error()}
		}
		return jobFailureProblems(where+".template.spec", js)
	}
	return []string{"spec.template.spec.replicatedJobs: no launcher replicated job"}
}

// jobFailureProblems checks a launcher Job spec (see
// trainerLauncherFailureProblems); where is the spec's path.
func jobFailureProblems(where string, js batchv1.JobSpec) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, where+"."+fmt.Sprintf(format, a...)) }
	if rp := js.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		at("template.spec.restartPolicy %q: want Never, set explicitly (JobSet defaults an unset one to OnFailure, "+
			"which reruns the same failure in place and lets the Job controller delete the pod, termination message and log with it; "+
			"podFailurePolicy requires Never)", rp)
	}
	if js.BackoffLimit == nil || *js.BackoffLimit < 0 || *js.BackoffLimit > launcherBackoffLimitMax {
		got := "unset (6)"
		if js.BackoffLimit != nil {
			got = fmt.Sprint(*js.BackoffLimit)
		}
		at("backoffLimit %s: want 0..%d: it counts only the failures no podFailurePolicy rule matches (a pod refused before its container ran)",
			got, launcherBackoffLimitMax)
	}
	if len(js.Template.Spec.Containers) == 0 {
		return append(errs, where+".template.spec.containers: none")
	}
	launcher := js.Template.Spec.Containers[0].Name
	var rules []batchv1.PodFailurePolicyRule
	if js.PodFailurePolicy != nil {
		rules = js.PodFailurePolicy.Rules
	}
	if len(rules) < 1 || !ignoresDisruption(rules[0]) {
		at("podFailurePolicy.rules[0]: want {action: Ignore, onPodConditions: [{type: %s, status: \"True\"}]}: "+
			"an evicted, preempted or drained launcher is replaced and not counted (rules apply in order, so this one comes first)", disruptionTarget)
	}
	if len(rules) < 2 || !failsOnAnyExit(rules[1], launcher) {
		at("podFailurePolicy.rules[1]: want {action: FailJob, onExitCodes: {containerName: %s, operator: NotIn, values: [0]}}: "+
			"every non-zero exit of the launcher (podmpi's 64-74, mpirun's code passed through) is deterministic and fails the job at once", launcher)
	}
	return errs
}

// ignoresDisruption reports whether r is Ignore on the DisruptionTarget
// condition being true.
func ignoresDisruption(r batchv1.PodFailurePolicyRule) bool {
	if r.Action != batchv1.PodFailurePolicyActionIgnore || r.OnExitCodes != nil {
		return false
	}
	return slices.ContainsFunc(r.OnPodConditions, func(p batchv1.PodFailurePolicyOnPodConditionsPattern) bool {
		return p.Type == disruptionTarget && (p.Status == "" || p.Status == corev1.ConditionTrue)
	})
}

// failsOnAnyExit reports whether r is FailJob on any non-zero exit code of
// container.
func failsOnAnyExit(r batchv1.PodFailurePolicyRule, container string) bool {
	e := r.OnExitCodes
	return r.Action == batchv1.PodFailurePolicyActionFailJob && e != nil && e.ContainerName != nil &&
		*e.ContainerName == container && e.Operator == batchv1.PodFailurePolicyOnExitCodesOpNotIn &&
		slices.Equal(e.Values, []int32{0})
}

// mpiJobLauncherFailureProblems checks an MPIJob. mpi-operator builds the
// launcher Job itself: it takes the pod's restartPolicy from
// mpiReplicaSpecs.Launcher.restartPolicy (default OnFailure; a
// restartPolicy in the pod template is overridden, with a Warning Event) and
// backoffLimit from runPolicy.backoffLimit, and never sets a
// podFailurePolicy. So the launcher runs with Never and backoffLimit 0, at
// the cost that a disrupted launcher is not retried.
func mpiJobLauncherFailureProblems(d document) []string {
	var errs []string
	const launcher = "spec.mpiReplicaSpecs.Launcher"
	if rp := dig(d.Obj, "spec", "mpiReplicaSpecs", "Launcher", "restartPolicy"); rp != string(corev1.RestartPolicyNever) {
		errs = append(errs, fmt.Sprintf("%s.restartPolicy %s: want Never (mpi-operator's default OnFailure reruns the same failure in place "+
			"and the Job controller deletes the pod, termination message and log with it)", launcher, canonical(rp)))
	}
	if rp := dig(d.Obj, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "restartPolicy"); rp != nil {
		errs = append(errs, fmt.Sprintf("%s.template.spec.restartPolicy %s: set %s.restartPolicy instead; mpi-operator overrides this one and records a Warning Event",
			launcher, canonical(rp), launcher))
	}
	if bl := num(dig(d.Obj, "spec", "runPolicy", "backoffLimit")); bl != "0" {
		if bl == "" {
			bl = "unset (6)"
		}
		errs = append(errs, fmt.Sprintf("spec.runPolicy.backoffLimit %s: want 0: mpi-operator gives its launcher Job no podFailurePolicy, "+
			"so any other value reruns a failure podmpi named as deterministic (the cost: an evicted or preempted launcher is not retried either)", bl))
	}
	return errs
}
