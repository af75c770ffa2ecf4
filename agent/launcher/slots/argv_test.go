package slots

import (
	"reflect"
	"strings"
	"testing"
)

func TestHostfileArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		want []string // option=value
	}{
		// The Kubeflow SDK's command: the hostfile before the program, which
		// has its own "-c".
		{"mpirun --hostfile /etc/mpi/hostfile bash -c script", []string{"--hostfile=/etc/mpi/hostfile"}},
		{"mpiexec.hydra -f /tmp/hosts -np 4 hostname", []string{"-f=/tmp/hosts"}},
		{"mpiexec -hostfile h -machinefile m ./a", []string{"-hostfile=h", "-machinefile=m"}},
		{"mpirun --hostfile=/x --default-hostfile /y ./a", []string{"--hostfile=/x", "--default-hostfile=/y"}},
		{"mpirun -np 2 --mca btl tcp,self --machinefile /m ./a", []string{"--machinefile=/m"}},
		{"mpirun ./a --hostfile /not/mpiruns", nil},
		{"mpirun --hostfile", nil},
		{"bash -c mpirun --hostfile /x", nil},
		{"mpirun -x f ./a", nil},
	} {
		var got []string
		for _, a := range HostfileArgs(strings.Fields(tc.cmd)) {
			got = append(got, strings.TrimSuffix(a.Option, "="+a.Value)+"="+a.Value)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("HostfileArgs(%q) = %q, want %q", tc.cmd, got, tc.want)
		}
	}
	if got := CommandHostfile(strings.Fields("mpirun --hostfile /a -f /b ./x")); got != "/a" {
		t.Errorf("CommandHostfile = %q", got)
	}
}

func TestReplaceHostfile(t *testing.T) {
	t.Parallel()
	argv := []string{"mpirun", "--hostfile", "/etc/mpi/hostfile", "--hostfile=/etc/mpi//hostfile", "-f", "/other", "bash", "-c", "x --hostfile /etc/mpi/hostfile"}
	out, replaced := ReplaceHostfile(argv, "/etc/mpi/hostfile", "/tmp/podmpi/hostfile")
	want := []string{"mpirun", "--hostfile", "/tmp/podmpi/hostfile", "--hostfile=/tmp/podmpi/hostfile", "-f", "/other", "bash", "-c", "x --hostfile /etc/mpi/hostfile"}
	if !reflect.DeepEqual(out, want) || !reflect.DeepEqual(replaced, []string{"--hostfile", "--hostfile=/etc/mpi//hostfile"}) {
		t.Fatalf("ReplaceHostfile = %q, %q", out, replaced)
	}
	if argv[2] != "/etc/mpi/hostfile" {
		t.Fatal("argv modified")
	}
	if out, replaced := ReplaceHostfile(argv, "", "/x"); !reflect.DeepEqual(out, argv) || replaced != nil {
		t.Fatalf("empty from: %q %q", out, replaced)
	}
}

func TestNamesHostsAndInfoOnly(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][2]bool{
		"mpirun -H a,b -np 2 ./x":       {true, false},
		"mpirun --host a:2 ./x":         {true, false},
		"mpiexec -hosts a,b ./x":        {true, false},
		"mpirun --version":              {false, true},
		"mpirun -V":                     {false, true},
		"mpiexec.hydra -info":           {false, true},
		"mpirun --help":                 {false, true},
		"mpiexec -h":                    {false, true},
		"mpirun ./a --version -H x":     {false, false},
		"mpirun --hostfile h bash -c x": {false, false},
		"mpirun -x H ./a":               {false, false},
		"python -V":                     {false, false},
	} {
		argv := strings.Fields(cmd)
		if got := [2]bool{NamesHosts(argv), InfoOnly(argv)}; got != want {
			t.Errorf("%q: NamesHosts, InfoOnly = %v, want %v", cmd, got, want)
		}
	}
}

// FuzzHostfileArgs: any argv; replacing never changes the length or words
// other than hostfile values, and a replaced hostfile is found again.
func FuzzHostfileArgs(f *testing.F) {
	f.Add("mpirun\x00--hostfile\x00/etc/mpi/hostfile\x00bash\x00-c\x00x")
	f.Add("mpiexec.hydra\x00-f=/h\x00-np\x002\x00a")
	f.Add("mpirun\x00--mca\x00a\x00b\x00--hostfile")
	f.Add("mpiexec.a\x00-=/h\x00") // an unknown option with "=": once looped forever
	f.Add("mpiexec\x00-f\x00")     // an empty hostfile is none
	f.Fuzz(func(t *testing.T, joined string) {
		argv := strings.Split(joined, "\x00")
		args := HostfileArgs(argv)
		for _, a := range args {
			out, replaced := ReplaceHostfile(argv, a.Value, "/new")
			if len(out) != len(argv) || len(replaced) == 0 {
				t.Fatalf("ReplaceHostfile(%q, %q) = %q, %q", argv, a.Value, out, replaced)
			}
			changed := 0
			for i := range out {
				if out[i] != argv[i] {
					changed++
				}
			}
			if changed > len(replaced) {
				t.Fatalf("%d words changed for %d options: %q -> %q", changed, len(replaced), argv, out)
			}
			if got := HostfileArgs(out); len(got) != len(args) {
				t.Fatalf("hostfile options %d after replacing, %d before: %q", len(got), len(args), out)
			}
		}
	})
}

func TestCommandOptions(t *testing.T) {
	t.Parallel()
	got := CommandOptions(strings.Fields("mpirun -np 8 --mca btl tcp,self --map-by=node -x A ./a --hostfile /theirs : -n 1 ./b"))
	want := []CommandOption{{"np", []string{"8"}}, {"mca", []string{"btl", "tcp,self"}}, {"map-by", []string{"node"}}, {"x", []string{"A"}},
		{"n", []string{"1"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CommandOptions = %q, want %q", got, want)
	}
	if got := CommandOptions(strings.Fields("bash -c mpirun -np 2")); got != nil {
		t.Errorf("not an MPI launcher: %q", got)
	}
}
