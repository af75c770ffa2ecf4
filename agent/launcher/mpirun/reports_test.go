package mpirun

import (
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/mpi"
)

func TestAskReports(t *testing.T) {
	const bindingsOn = envReportBindings + "=1"
	for _, tc := range []struct {
		impl     mpi.Implementation
		cmd      string
		env      []string
		wantCmd  string
		wantEnv  []string
		wantAsks Asked
	}{
		// Open MPI 4: the parameter in mpirun's environment, the command as it is.
		{mpi.OpenMPI4, "mpirun -np 8 --hostfile /h python3 train.py", nil, "mpirun -np 8 --hostfile /h python3 train.py", []string{bindingsOn},
			Asked{Bindings: true}},
		{mpi.OpenMPI4, "/usr/bin/mpirun.openmpi bash -c x", []string{"A=1"}, "/usr/bin/mpirun.openmpi bash -c x", []string{"A=1", bindingsOn},
			Asked{Bindings: true}},
		// ... unless the command or the environment says it.
		{mpi.OpenMPI4, "mpirun --report-bindings ./a", nil, "mpirun --report-bindings ./a", nil, Asked{}},
		{mpi.OpenMPI4, "mpirun --bind-to core:report ./a", nil, "mpirun --bind-to core:report ./a", nil, Asked{}},
		{mpi.OpenMPI4, "mpirun --mca hwloc_base_report_bindings 1 ./a", nil, "mpirun --mca hwloc_base_report_bindings 1 ./a", nil, Asked{}},
		{mpi.OpenMPI4, "mpirun ./a", []string{envReportBindings + "=0"}, "mpirun ./a", []string{envReportBindings + "=0"}, Asked{}},
		// A program's own option of the same name is not mpirun's.
		{mpi.OpenMPI4, "mpirun ./a --report-bindings", nil, "mpirun ./a --report-bindings", []string{bindingsOn}, Asked{Bindings: true}},
		// Open MPI 5: on the command line, PRRTE reads no parameter for it.
		{mpi.OpenMPI5, "mpirun -np 4 ./a", nil, "mpirun --report-bindings -np 4 ./a", nil, Asked{Bindings: true}},
		{mpi.OpenMPI5, "mpirun --display map,bind ./a", nil, "mpirun --display map,bind ./a", nil, Asked{}},
		{mpi.OpenMPI5, "mpirun -np 2 ./a : -np 2 ./b", nil, "mpirun --report-bindings -np 2 ./a : -np 2 ./b", nil, Asked{Bindings: true}},
		// Hydra: its list of exit codes.
		{mpi.MPICH, "/usr/bin/mpiexec.hydra -n 3 ./a", nil, "/usr/bin/mpiexec.hydra -print-all-exitcodes -n 3 ./a", nil, Asked{ExitCodes: true}},
		{mpi.IntelMPI, "mpirun -np 6 ./a", nil, "mpirun -print-all-exitcodes -np 6 ./a", nil, Asked{ExitCodes: true}},
		{mpi.MPICH, "mpiexec -print-all-exitcodes -n 3 ./a", nil, "mpiexec -print-all-exitcodes -n 3 ./a", nil, Asked{}},
		// Not the MPI's launcher: nothing to see, nothing added.
		{mpi.OpenMPI4, "bash -c mpirun", nil, "bash -c mpirun", nil, Asked{}},
		{mpi.MPICH, "python3 run.py", nil, "python3 run.py", nil, Asked{}},
	} {
		argv, env, asked := AskReports(tc.impl, strings.Fields(tc.cmd), tc.env)
		if got := strings.Join(argv, " "); got != tc.wantCmd || !slices.Equal(env, tc.wantEnv) || asked != tc.wantAsks {
			t.Errorf("AskReports(%s, %q, %q) = %q, %q, %+v; want %q, %q, %+v", tc.impl, tc.cmd, tc.env, got, env, asked,
				tc.wantCmd, tc.wantEnv, tc.wantAsks)
		}
	}
}

// FuzzAskReports: any command and environment; the command keeps every
// word in order and gains at most the one option right after its name; the
// environment at most the one variable; what was added is said.
func FuzzAskReports(f *testing.F) {
	f.Add("mpirun -np 3 --mca btl tcp ./a", "A=1", 0)
	f.Add("mpiexec.hydra -n 2 ./a : -n 1 ./b", "", 2)
	f.Add("mpirun --display=bind ./a", envReportBindings+"=1", 1)
	impls := []mpi.Implementation{mpi.OpenMPI4, mpi.OpenMPI5, mpi.MPICH, mpi.IntelMPI}
	f.Fuzz(func(t *testing.T, cmd, envs string, which int) {
		impl := impls[(which%len(impls)+len(impls))%len(impls)]
		in, inEnv := strings.Fields(cmd), strings.Split(envs, "\n")
		argv, env, asked := AskReports(impl, in, inEnv)
		switch {
		case len(argv) == len(in):
			if !slices.Equal(argv, in) {
				t.Fatalf("command changed: %q -> %q", in, argv)
			}
		case len(argv) == len(in)+1:
			if argv[0] != in[0] || !slices.Equal(argv[2:], in[1:]) || !asked.Bindings && !asked.ExitCodes {
				t.Fatalf("command %q -> %q (asked %+v)", in, argv, asked)
			}
		default:
			t.Fatalf("command %q -> %q", in, argv)
		}
		if len(env) != len(inEnv) && (len(env) != len(inEnv)+1 || !asked.Bindings) {
			t.Fatalf("environment %q -> %q (asked %+v)", inEnv, env, asked)
		}
	})
}
