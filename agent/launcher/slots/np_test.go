package slots

import (
	"reflect"
	"strings"
	"testing"
)

var npCases = []struct {
	name   string
	cmd    string
	isMPI  bool
	option string // NPOption; "" = none
}{
	{"openmpi -np", "mpirun -np 4 python train.py", true, "-np"},
	{"openmpi --np", "mpirun --np 4 ./a.out", true, "--np"},
	{"openmpi -n", "mpirun -n 4 ./a.out", true, "-n"},
	{"openmpi --n", "mpirun --n 4 ./a.out", true, "--n"},
	{"openmpi -c", "mpirun -c 4 ./a.out", true, "-c"},
	{"equals", "mpirun -np=4 ./a.out", true, "-np=4"},
	{"double dash equals", "mpirun --np=8 ./a.out", true, "--np=8"},
	{"hydra -n", "mpiexec.hydra -n 2 -f /etc/mpi/hostfile ./cpi", true, "-n"},
	{"hydra -np after values", "mpiexec -f /etc/mpi/hostfile -genv A B -np 2 ./cpi", true, "-np"},
	{"path and suffix", "/usr/bin/mpirun.openmpi --allow-run-as-root -np 2 hostname", true, "-np"},
	{"orterun", "orterun -np 2 hostname", true, "-np"},
	{"prterun", "prterun --n 2 hostname", true, "--n"},
	{"after mca", "mpirun --mca btl tcp,self -x NCCL_DEBUG=INFO -np 16 python t.py", true, "-np"},
	{"mca value looks like -n", "mpirun -mca plm_rsh_args -n -np 2 x", true, "-np"},
	{"none", "mpirun --allow-run-as-root -x LD_LIBRARY_PATH python train.py", true, ""},
	{"program's -n", "mpirun -x FOO python train.py -n 5", true, ""},
	{"program's -np", "mpirun --hostfile /etc/mpi/hostfile ./bench -np 3", true, ""},
	{"after --", "mpirun --bind-to none -- ./prog -np 3", true, ""},
	{"mpmd second context", "mpirun -x A ./a : -np 2 ./b", true, "-np"},
	{"mpmd none", "mpirun ./a -n 2 : ./b -c 3", true, ""},
	{"per node -N", "mpirun -N 8 python t.py", true, "-N"},
	{"npernode", "mpirun -npernode 2 ./a", true, "-npernode"},
	{"hydra ppn", "mpiexec -ppn 8 -f hosts ./a", true, "-ppn"},
	{"map-by ppr", "mpirun --map-by ppr:4:node ./a", true, "--map-by"},
	{"map-by ppr attached", "mpirun --map-by=ppr:4:node ./a", true, "--map-by=ppr:4:node"},
	{"map-by slot", "mpirun --map-by slot ./a", true, ""},
	{"app file", "mpirun --app appfile", true, "--app"},
	{"hydra configfile", "mpiexec -configfile cfg", true, "-configfile"},
	{"option value at end", "mpirun -x", true, ""},
	{"bare mpirun", "mpirun", true, ""},
	{"not mpirun", "bash -c mpirun -np 4 ./a", false, ""},
	{"python", "python train.py -n 4", false, ""},
	{"horovodrun", "horovodrun -np 4 python t.py", false, ""},
	{"mpirun prefix name", "mpirunner -np 4", false, ""},
	{"dot only", "mpirun. -np 4", false, ""},
	{"env wrapper", "env A=B mpirun -np 4 ./a", false, ""},
}

func TestNPOption(t *testing.T) {
	t.Parallel()
	for _, tc := range npCases {
		argv := strings.Fields(tc.cmd)
		if got := IsMPIRun(argv); got != tc.isMPI {
			t.Errorf("%s: IsMPIRun = %v", tc.name, got)
		}
		if got := NPOption(argv); got != tc.option {
			t.Errorf("%s: NPOption(%q) = %q, want %q", tc.name, tc.cmd, got, tc.option)
		}
		if got := CommandHasNP(argv); got != (tc.option != "") {
			t.Errorf("%s: CommandHasNP = %v", tc.name, got)
		}
	}
	if IsMPIRun(nil) || CommandHasNP(nil) || CommandHasNP([]string{}) {
		t.Error("empty argv")
	}
}

func TestInjectNP(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cmd  string
		np   int
		want string
	}{
		{"mpirun python train.py -n 5", 8, "mpirun -np 8 python train.py -n 5"},
		{"/opt/openmpi/bin/mpirun --allow-run-as-root ./a", 2, "/opt/openmpi/bin/mpirun -np 2 --allow-run-as-root ./a"},
		{"mpiexec.hydra -f /etc/mpi/hostfile ./cpi", 4, "mpiexec.hydra -np 4 -f /etc/mpi/hostfile ./cpi"},
		{"mpirun -np 2 ./a", 8, "mpirun -np 2 ./a"},     // already set
		{"mpirun -N 2 ./a", 8, "mpirun -N 2 ./a"},       // per node count
		{"bash -c mpirun ./a", 8, "bash -c mpirun ./a"}, // not a launcher
		{"mpirun ./a", 0, "mpirun ./a"},                 // nothing to inject
		{"mpirun", 3, "mpirun -np 3"},                   // bare
		{"mpiexec -genv A B ./cpi -np 1", 6, "mpiexec -np 6 -genv A B ./cpi -np 1"},
	}
	for _, tc := range cases {
		argv := strings.Fields(tc.cmd)
		orig := append([]string(nil), argv...)
		got := InjectNP(argv, tc.np)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("InjectNP(%q, %d) = %q, want %q", tc.cmd, tc.np, got, tc.want)
		}
		if !reflect.DeepEqual(argv, orig) {
			t.Errorf("InjectNP modified its input: %q", argv)
		}
		if len(got) > 0 && len(argv) > 0 && &got[0] == &argv[0] {
			t.Errorf("InjectNP returned its input slice")
		}
	}
}
