package mpi

import (
	"strings"
	"testing"
)

// TestCommandDaemon: the daemons of mpirun's real launch commands are
// found; a command that only mentions one in an argument runs none.
func TestCommandDaemon(t *testing.T) {
	for cmd, want := range map[string]string{
		// Open MPI 4 over sh (plm_rsh), as orterun sends it.
		` PATH=/usr/bin:$PATH ; export PATH ; LD_LIBRARY_PATH=/usr/lib:${LD_LIBRARY_PATH:-} ; export LD_LIBRARY_PATH ; ` +
			`DYLD_LIBRARY_PATH=/usr/lib:${DYLD_LIBRARY_PATH:-} ; export DYLD_LIBRARY_PATH ;   /usr/bin/orted -mca ess "env" -mca ess_base_jobid "123"`: "orted",
		// Open MPI 5 with a prefix, the program quoted.
		`PATH=/opt/ompi/bin:$PATH ; export PATH ; "/opt/ompi/bin/prted" --prtemca ess "env"`: "prted",
		// Open MPI sourcing .profile first.
		`( test ! -r ./.profile || . ./.profile; PATH=/x:$PATH ; export PATH ; orted -mca x y )`: "orted",
		// Hydra (MPICH, Intel MPI).
		`/usr/bin/hydra_pmi_proxy --control-port l:3000 --rmk user --launcher ssh --demux poll --pgid 0 --retries 10 --usize -2 --proxy-id 1`: "hydra_pmi_proxy",
		`"/opt/intel/mpi/bin/hydra_bstrap_proxy" --upstream-host l --upstream-port 40000`:                                                     "hydra_bstrap_proxy",
		`exec env -i FOO=1 orted`:            "orted",
		`cd /tmp && orted`:                   "orted",
		`true;orted`:                         "orted",
		`if test -x /x; then { orted; }; fi`: "orted",
		// Not a daemon launch: what a job's own scripts run over ssh.
		`git clone ssh://h/orted`:        "",
		`cat /tmp/orted.log`:             "",
		`echo orted prted`:               "",
		`sh -c "hydra_pmi_proxy"`:        "",
		`hostname`:                       "",
		`/usr/local/bin/orted.wrapper x`: "",
		// A lookup runs nothing (the launcher's probe); command alone runs.
		`command -v 'orted' || command -v 'prted'`: "",
		`command -V orted`:                         "",
		`command -pv orted; hostname`:              "",
		`command -p orted -mca x y`:                "orted",
		`command -v orted && orted -mca x y`:       "orted",
		``:                                         "",
		`;;;`:                                      "",
	} {
		if got := CommandDaemon(cmd); got != want {
			t.Errorf("CommandDaemon(%q) = %q, want %q", cmd, got, want)
		}
	}
}

func TestCommandName(t *testing.T) {
	for cmd, want := range map[string]string{
		`PATH=/x ; export PATH ; /x/orted -mca a b`:                          "orted",
		" PATH=/usr/bin:$PATH ; export PATH ; orted -mca ess env":            "orted",
		`PATH=/opt/ompi/bin:$PATH ; export PATH ; /opt/ompi/bin/prted --x y`: "prted",
		"/usr/bin/hydra_pmi_proxy --control-port launcher:4000":              "hydra_pmi_proxy",
		`FOO=1 "/opt/app/run.sh" x`:                                          "/opt/app/run.sh",
		"command -v 'orted' || command -v 'prted'":                           "command",
		`git fetch origin`: "git",
		`HOROVOD_RANK=0 "python3" train.py --token=abc`: "python3",
		"SECRET=x /opt/app/train --key k":               "/opt/app/train",
		"sorted-files --orted":                          "sorted-files",
		`X=1 Y=2`:                                       "",
		"":                                              "",
	} {
		if got := CommandName(cmd); got != want {
			t.Errorf("CommandName(%q) = %q, want %q", cmd, got, want)
		}
	}
}

func TestIsDaemon(t *testing.T) {
	for _, d := range AllDaemons() {
		if !IsDaemon(d) {
			t.Errorf("IsDaemon(%q) = false", d)
		}
	}
	for _, s := range []string{"", "mpirun", "/usr/bin/orted", "orted.sh"} {
		if IsDaemon(s) {
			t.Errorf("IsDaemon(%q) = true", s)
		}
	}
}

func FuzzCommandDaemon(f *testing.F) {
	f.Add(`PATH=/x:$PATH ; export PATH ; "/x/orted" -mca ess "env"`)
	f.Add(`( test ! -r ./.profile || . ./.profile; orted )`)
	f.Add(`git clone ssh://h/orted`)
	f.Add(strings.Repeat("; ", 5000) + "orted")
	f.Fuzz(func(t *testing.T, cmd string) {
		d := CommandDaemon(cmd)
		if d != "" && !IsDaemon(d) {
			t.Fatalf("CommandDaemon(%q) = %q, not a daemon", cmd, d)
		}
		if p := CommandName(cmd); d != "" && p != d {
			t.Fatalf("CommandName(%q) = %q, want the daemon %q", cmd, p, d)
		}
	})
}
