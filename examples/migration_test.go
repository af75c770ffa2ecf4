package examples

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// migrationPair is one directory of examples/migration: the same job as an
// MPIJob and as a TrainJob with its TrainingRuntime.
type migrationPair struct {
	dir      string
	mpijob   document
	runtime  document
	trainjob document
}

func loadMigrationPairs(t *testing.T) []migrationPair {
	t.Helper()
	var pairs []migrationPair
	for _, set := range loadManifestSets(t) {
		if !set.isMigration() {
			continue
		}
		p := migrationPair{dir: set.Name}
		count := map[string]int{}
		for _, d := range set.Docs {
			count[d.GVK.Kind]++
			switch {
			case d.GVK.Kind == "MPIJob" && filepath.Base(d.File) == "mpijob.yaml":
				p.mpijob = d
			case d.GVK.Kind == "TrainingRuntime" && filepath.Base(d.File) == "trainjob.yaml":
				p.runtime = d
			case d.GVK.Kind == "TrainJob" && filepath.Base(d.File) == "trainjob.yaml":
				p.trainjob = d
			}
		}
		if count["MPIJob"] != 1 || count["TrainingRuntime"] != 1 || count["TrainJob"] != 1 || len(set.Docs) != 3 {
			t.Errorf("%s: want mpijob.yaml with one MPIJob and trainjob.yaml with one TrainingRuntime and one TrainJob, have %v", set.Name, count)
			continue
		}
		pairs = append(pairs, p)
	}
	return pairs
}

// strs converts a decoded YAML list to strings.
func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// num returns a decoded YAML number as text ("" when absent).
func num(v any) string {
	if v == nil {
		return ""
	}
	return canonical(v)
}

// TestMigrationPairsMatch: both sides of every migration pair describe the
// same job, field by field as docs/migration.md maps them. A pair whose
// sides drift apart would teach a wrong mapping.
func TestMigrationPairsMatch(t *testing.T) {
	pairs := loadMigrationPairs(t)
	for _, p := range pairs {
		t.Run(filepath.Base(p.dir), func(t *testing.T) {
			mj, rt, tj := p.mpijob.Obj, p.runtime.Obj, p.trainjob.Obj
			if got := dig(tj, "spec", "runtimeRef", "name"); got != p.runtime.Name || dig(tj, "spec", "runtimeRef", "kind") != "TrainingRuntime" {
				t.Errorf("TrainJob runtimeRef %v/%v, want TrainingRuntime %s", dig(tj, "spec", "runtimeRef", "kind"), got, p.runtime.Name)
			}
			rjs, _ := dig(rt, "spec", "template", "spec", "replicatedJobs").([]any)
			if len(rjs) != 2 {
				t.Fatalf("runtime: want replicatedJobs [node launcher], have %d", len(rjs))
			}
			node, launcher := rjs[0], rjs[1]
			mjL := dig(mj, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers")
			mjW := dig(mj, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers")
			rtL := dig(launcher, "template", "spec", "template", "spec", "containers")
			rtW := dig(node, "template", "spec", "template", "spec", "containers")
			first := func(v any) any {
				l, _ := v.([]any)
				if len(l) == 0 {
					return nil
				}
				return l[0]
			}
			check := func(what string, mpijob, trainer any) {
				t.Helper()
				if canonical(mpijob) != canonical(trainer) {
					t.Errorf("%s: MPIJob %s, Trainer %s", what, canonical(mpijob), canonical(trainer))
				}
			}
			// The pods: same image, same worker command and env.
			check("launcher image", dig(first(mjL), "image"), dig(first(rtL), "image"))
			check("worker image", dig(first(mjW), "image"), dig(first(rtW), "image"))
			check("worker command", dig(first(mjW), "command"), dig(first(rtW), "command"))
			check("worker args", dig(first(mjW), "args"), dig(first(rtW), "args"))
			check("worker env", dig(first(mjW), "env"), dig(first(rtW), "env"))
			check("launcher env", dig(first(mjL), "env"), dig(first(rtL), "env"))
			check("launcher resources", dig(first(mjL), "resources"), dig(first(rtL), "resources"))
			check("worker resources", dig(first(mjW), "resources"), dig(first(rtW), "resources"))
			// The command: the MPIJob launcher's argv is the runtime's
			// launcher command followed by the TrainJob's args.
			mjArgv := append(strs(dig(first(mjL), "command")), strs(dig(first(mjL), "args"))...)
			tjArgv := append(strs(dig(first(rtL), "command")), strs(dig(tj, "spec", "trainer", "args"))...)
			if !slices.Equal(mjArgv, tjArgv) {
				t.Errorf("launcher argv: MPIJob %q, runtime command + TrainJob args %q", mjArgv, tjArgv)
			}
			// slotsPerWorker -> numProcPerNode (the TrainJob's overrides the runtime's).
			procs := dig(tj, "spec", "trainer", "numProcPerNode")
			if procs == nil {
				procs = dig(rt, "spec", "mlPolicy", "mpi", "numProcPerNode")
			}
			check("slotsPerWorker / numProcPerNode", dig(mj, "spec", "slotsPerWorker"), procs)
			// Worker.replicas -> trainer.numNodes, counting the launcher
			// when it runs ranks.
			law := dig(mj, "spec", "runLauncherAsWorker") == true
			lan := dig(rt, "spec", "mlPolicy", "mpi", "runLauncherAsNode") == true
			if law != lan {
				t.Errorf("runLauncherAsWorker %t but runLauncherAsNode %t", law, lan)
			}
			workers := num(dig(mj, "spec", "mpiReplicaSpecs", "Worker", "replicas"))
			nodes := num(dig(tj, "spec", "trainer", "numNodes"))
			want := workers
			if law {
				want = num(jsonInt(workers) + 1)
			}
			if nodes != want {
				t.Errorf("trainer.numNodes %s, want %s (Worker.replicas %s, launcher runs ranks: %t)", nodes, want, workers, law)
			}
			if n := num(dig(rt, "spec", "mlPolicy", "numNodes")); n != "1" {
				t.Errorf("runtime mlPolicy.numNodes %s, want 1 (the TrainJob sets the count)", n)
			}
			check("sshAuthMountPath", dig(mj, "spec", "sshAuthMountPath"), dig(rt, "spec", "mlPolicy", "mpi", "sshAuthMountPath"))
			// launcherCreationPolicy -> JobSet dependsOn.
			dep := canonical(dig(launcher, "dependsOn"))
			switch dig(mj, "spec", "launcherCreationPolicy") {
			case "WaitForWorkersReady":
				if dep != `[{"name":"node","status":"Ready"}]` {
					t.Errorf("launcherCreationPolicy WaitForWorkersReady, but the launcher's dependsOn is %s", dep)
				}
			default:
				if dep != "null" {
					t.Errorf("launcherCreationPolicy AtStartup, but the launcher dependsOn %s", dep)
				}
			}
			// mpiImplementation: Trainer takes only OpenMPI; the launcher
			// finds MPICH and Intel MPI itself.
			if got := dig(rt, "spec", "mlPolicy", "mpi", "mpiImplementation"); got != "OpenMPI" {
				t.Errorf("runtime mpiImplementation %v, want OpenMPI (the only value Trainer accepts)", got)
			}
			// runPolicy -> JobSet and Job fields.
			check("ttlSecondsAfterFinished", dig(mj, "spec", "runPolicy", "ttlSecondsAfterFinished"), dig(rt, "spec", "template", "spec", "ttlSecondsAfterFinished"))
			// runPolicy.backoffLimit 0 and Launcher.restartPolicy Never ->
			// the launcher job's restartPolicy Never and podFailurePolicy:
			// both fail at the first failure podmpi names; only the
			// TrainJob can also retry a disrupted launcher (mpi-operator
			// sets no podFailurePolicy), and its small backoffLimit counts
			// what neither rule matches.
			check("launcher restartPolicy", dig(mj, "spec", "mpiReplicaSpecs", "Launcher", "restartPolicy"),
				dig(launcher, "template", "spec", "template", "spec", "restartPolicy"))
			for _, e := range mpiJobLauncherFailureProblems(p.mpijob) {
				t.Errorf("MPIJob: %s", e)
			}
			for _, e := range trainerLauncherFailureProblems(p.runtime) {
				t.Errorf("runtime: %s", e)
			}
			// The token: the launcher's, never the workers'.
			check("launcher automountServiceAccountToken", dig(mj, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "automountServiceAccountToken"),
				dig(launcher, "template", "spec", "template", "spec", "automountServiceAccountToken"))
			check("worker automountServiceAccountToken", dig(mj, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "automountServiceAccountToken"),
				dig(node, "template", "spec", "template", "spec", "automountServiceAccountToken"))
			if p.mpijob.Name != p.trainjob.Name {
				t.Errorf("names differ: MPIJob %s, TrainJob %s (keep one name per pair)", p.mpijob.Name, p.trainjob.Name)
			}
		})
	}
}

// jsonInt parses a canonical integer ("2") for arithmetic.
func jsonInt(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestMigrationPairsCover: the pairs docs/migration.md promises exist, and
// each shows what its name says.
func TestMigrationPairsCover(t *testing.T) {
	byDir := map[string]migrationPair{}
	for _, p := range loadMigrationPairs(t) {
		byDir[filepath.Base(p.dir)] = p
	}
	for _, tc := range []struct {
		dir  string
		test func(p migrationPair) bool
		what string
	}{
		{"openmpi", func(p migrationPair) bool { return dig(p.mpijob.Obj, "spec", "mpiImplementation") == "OpenMPI" }, "mpiImplementation OpenMPI"},
		{"mpich", func(p migrationPair) bool { return dig(p.mpijob.Obj, "spec", "mpiImplementation") == "MPICH" }, "mpiImplementation MPICH"},
		{"intelmpi", func(p migrationPair) bool { return dig(p.mpijob.Obj, "spec", "mpiImplementation") == "Intel" }, "mpiImplementation Intel"},
		{"horovod", func(p migrationPair) bool {
			return strings.Contains(canonical(p.mpijob.Obj), "/horovod:") && strings.Contains(canonical(p.trainjob.Obj), "horovod")
		}, "the Horovod image and a Horovod script"},
		{"launcher-as-worker", func(p migrationPair) bool { return dig(p.mpijob.Obj, "spec", "runLauncherAsWorker") == true }, "runLauncherAsWorker: true"},
	} {
		p, ok := byDir[tc.dir]
		if !ok {
			t.Errorf("examples/%s/%s: missing migration pair", migrationDir, tc.dir)
			continue
		}
		if !tc.test(p) {
			t.Errorf("examples/%s/%s: does not show %s", migrationDir, tc.dir, tc.what)
		}
	}
}
