package e2e

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A TrainJob's spec.trainer.env is meant for the training processes, every
// rank of them (kubeflow/trainer#3427: under OpenSSH it reaches only the
// launcher's). Trainer v2.1.0 and later set it on the launcher and, with
// runLauncherAsNode (every podmpi runtime), on the node pods too, and
// worker-agent's sessions keep their pod's environment, so the daemons and
// ranks on the node pods see it. Trainer v2.0.0 sets it on the launcher
// only: Hydra (MPICH, Intel MPI) passes the launcher's environment to every
// rank, Open MPI only what mpirun's -x names.

// trainerEnvProbe is the variable the checks put in trainer.env.
const trainerEnvProbe = "PODMPI_TRAINER_ENV_PROBE"

// envOnLauncherOnly reports whether Trainer release v puts trainer.env on
// the launcher pod only (v2.0.x).
func envOnLauncherOnly(v string) bool { return strings.HasPrefix(v, "v2.0.") }

// withTrainerEnvCheck gives tj (the example TrainJob, args "mpirun
// podmpi-allreduce ...") trainer.env trainerEnvProbe=<random> and has every
// rank print the rank, its host and what it sees of that variable before it
// runs podmpi-allreduce; xForward adds Open MPI's "-x trainerEnvProbe",
// which Trainer v2.0.0 needs. It returns the value.
func withTrainerEnvCheck(t *testing.T, tj *unstructured.Unstructured, xForward bool) string {
	t.Helper()
	value := "trainer-env-" + randSuffix()
	setNested(t, tj, []any{map[string]any{"name": trainerEnvProbe, "value": value}}, "spec", "trainer", "env")
	args, _, _ := unstructured.NestedStringSlice(tj.Object, "spec", "trainer", "args")
	if len(args) < 2 || args[0] != "mpirun" {
		t.Fatalf("the example TrainJob's args %q do not start with mpirun", args)
	}
	out := []any{"mpirun"}
	if xForward {
		out = append(out, "-x", trainerEnvProbe)
	}
	// ${...} and $HOSTNAME, never $(...): Kubernetes expands $(NAME) in args.
	out = append(out, "bash", "-c", `echo "trainer-env rank ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} on $HOSTNAME: ${`+trainerEnvProbe+`:-unset}"; exec "$@"`, "bash")
	for _, a := range args[1:] {
		out = append(out, a)
	}
	setNested(t, tj, out, "spec", "trainer", "args")
	return value
}

var trainerEnvLine = regexp.MustCompile(`(?m)^trainer-env rank (\d+) on (\S+): (.*)$`)

// checkTrainerEnv checks that each of ranks ranks saw value.
func checkTrainerEnv(t *testing.T, log, value string, ranks int) {
	t.Helper()
	seen := map[string]string{}
	for _, m := range trainerEnvLine.FindAllStringSubmatch(log, -1) {
		seen[m[1]] = m[2] + ": " + m[3]
		if m[3] != value {
			t.Errorf("rank %s on %s sees %s=%q, want the TrainJob's %q", m[1], m[2], trainerEnvProbe, m[3], value)
		}
	}
	if len(seen) != ranks {
		t.Errorf("%d ranks printed %s, want %d: %v", len(seen), trainerEnvProbe, ranks, seen)
	}
}
