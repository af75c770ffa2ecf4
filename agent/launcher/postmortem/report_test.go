package postmortem

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Real output of Open MPI 4.1 (mpirun.openmpi) and MPICH 4.0's Hydra
// (mpiexec.hydra), copied from runs on Debian 12.
const (
	ompiSEGV = `rank 1 up
[vm:06435] *** Process received signal ***
[vm:06435] Signal: Segmentation fault (11)
[vm:06435] *** End of error message ***
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun.openmpi noticed that process rank 1 with PID 0 on node dg-node-0-0 exited on signal 11 (Segmentation fault).
--------------------------------------------------------------------------
`
	ompiExit3 = `--------------------------------------------------------------------------
mpirun.openmpi detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[30130,1],3]
  Exit code:    3
--------------------------------------------------------------------------
`
	ompiLost = `--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[44262,0],0] on node dg-launcher-0-0
  Remote daemon: [[44262,0],2] on node dg-node-0-1.dg

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
`
	hydraSEGV = `
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 5711 RUNNING AT dg-node-0-1.dg
=   EXIT CODE: 11
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)
This typically refers to a problem with your application.
Please see the FAQ page for debugging suggestions
`
	prrteSEGV    = "prterun noticed that process rank 2 with PID 4242 on node w-1 exited on signal 7 (Bus error).\n"
	ompiNoDaemon = `--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
This usually is caused by:
`
)

func collect(t *testing.T, out string, chunk int) []Report {
	t.Helper()
	c := NewCollector(func() time.Time { return time.Unix(1, 0) })
	var sink bytes.Buffer
	w := c.Writer(&sink)
	for i := 0; i < len(out); i += chunk {
		end := min(i+chunk, len(out))
		if n, err := w.Write([]byte(out[i:end])); err != nil || n != end-i {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	c.Flush(w)
	if sink.String() != out {
		t.Fatalf("output changed on its way through:\n%q\nwant\n%q", sink.String(), out)
	}
	return c.Reports()
}

func TestReports(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []Report
	}{
		{"open mpi signal", ompiSEGV, []Report{{Kind: ReportSignal, Rank: 1, PID: 0, Host: "dg-node-0-0", Signal: 11, ExitCode: -1}}},
		{"open mpi non-zero exit", ompiExit3, []Report{{Kind: ReportExit, Rank: 3, ExitCode: 3}}},
		{"open mpi lost daemon", ompiLost, []Report{{Kind: ReportDaemonLost, Rank: -1, Host: "dg-node-0-1.dg", ExitCode: -1}}},
		{"open mpi daemons not started", ompiNoDaemon, []Report{{Kind: ReportDaemonFailed, Rank: -1, ExitCode: -1}}},
		{"hydra signal", hydraSEGV, []Report{{Kind: ReportSignal, Rank: -1, PID: 5711, Host: "dg-node-0-1.dg", Signal: 11, ExitCode: -1}}},
		{"prrte signal", prrteSEGV, []Report{{Kind: ReportSignal, Rank: 2, PID: 4242, Host: "w-1", Signal: 7, ExitCode: -1}}},
		{"two messages", ompiExit3 + hydraSEGV, []Report{{Kind: ReportExit, Rank: 3, ExitCode: 3},
			{Kind: ReportSignal, Rank: -1, PID: 5711, Host: "dg-node-0-1.dg", Signal: 11, ExitCode: -1}}},
		{"hydra exit code without a signal, cut short", "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 9 RUNNING AT h\n=   EXIT CODE: 4\n",
			[]Report{{Kind: ReportExit, Rank: -1, PID: 9, Host: "h", ExitCode: 4}}},
		{"prrte non-zero exit", "prterun detected that one or more processes exited with non-zero status, thus causing\nthe job to be terminated. The first process to do so was:\n\n   Process name: [prterun-w-1234@1,5] Exit code:    2\n",
			[]Report{{Kind: ReportExit, Rank: 5, ExitCode: 2}}},
		{"nothing", "rank 0/4 on w: allreduce=6 (expect 6)\n", nil},
	} {
		for _, chunk := range []int{1, 7, 1 << 20} {
			got := collect(t, tc.out, chunk)
			if len(got) != len(tc.want) {
				t.Fatalf("%s (chunks of %d): %d reports %+v, want %d", tc.name, chunk, len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Kind != w.Kind || g.Rank != w.Rank || g.PID != w.PID || g.Host != w.Host || g.Signal != w.Signal || g.ExitCode != w.ExitCode {
					t.Errorf("%s (chunks of %d): report %d = %+v, want %+v", tc.name, chunk, i, g, w)
				}
				if g.Line == "" || g.Time != time.Unix(1, 0) {
					t.Errorf("%s: report %d has no line or time: %+v", tc.name, i, g)
				}
			}
		}
	}
}

func TestLongLinesPassThrough(t *testing.T) {
	long := strings.Repeat("x", 3*maxLine) + "\n" + prrteSEGV + strings.Repeat("y", maxLine+1)
	got := collect(t, long, 1000)
	if len(got) != 1 || got[0].Rank != 2 {
		t.Fatalf("reports = %+v; want the one message after the long line", got)
	}
}

func TestReportsBounded(t *testing.T) {
	got := collect(t, strings.Repeat(prrteSEGV, maxReports+10), 4096)
	if len(got) != maxReports {
		t.Fatalf("%d reports kept, want %d", len(got), maxReports)
	}
}

func FuzzScanWriter(f *testing.F) {
	for _, s := range []string{ompiSEGV, ompiExit3, ompiLost, hydraSEGV, prrteSEGV, "\r\n\n"} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		chunk = max(1, chunk%64+1)
		c := NewCollector(nil)
		var sink bytes.Buffer
		w := c.Writer(&sink)
		for i := 0; i < len(data); i += chunk {
			_, _ = w.Write(data[i:min(i+chunk, len(data))])
		}
		c.Flush(w)
		if !bytes.Equal(sink.Bytes(), data) {
			t.Fatalf("output changed")
		}
		if n := len(c.Reports()); n > maxReports {
			t.Fatalf("%d reports", n)
		}
	})
}

// reportsOf collects what the Collector reads in testdata/name, as if the
// launcher read every line at when.
func reportsOf(t *testing.T, name string, when time.Time) []Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(func() time.Time { return when })
	w := c.Writer(io.Discard)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	c.Flush(w)
	return c.Reports()
}

// TestReportsOfRealRuns reads mpirun's whole output of real failed runs
// across the network-namespace pods of test/e2e (TestDiagnosisNamesTheHost,
// Open MPI 4.1.4 of Debian 12, 4 worker pods of 2 slots): every rank
// exiting with status 7 (the first one is named without its host), orted
// dying of SIGSEGV as it starts on one worker, and OMPI_MCA_plm=isolated
// (no daemon started, no rank's word).
func TestReportsOfRealRuns(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []Report
	}{
		{"ompi4-every-rank-exit7.txt", []Report{{Kind: ReportExit, Rank: 4, ExitCode: 7}}},
		{"ompi4-orted-sigsegv-at-start.txt", []Report{{Kind: ReportDaemonFailed, Rank: -1, ExitCode: -1}}},
		{"ompi4-plm-isolated.txt", nil},
	} {
		got := reportsOf(t, tc.file, time.Unix(1, 0))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d reports %+v, want %d", tc.file, len(got), got, len(tc.want))
		}
		for i, w := range tc.want {
			if g := got[i]; g.Kind != w.Kind || g.Rank != w.Rank || g.PID != w.PID || g.Host != w.Host || g.ExitCode != w.ExitCode {
				t.Errorf("%s: report %d = %+v, want %+v", tc.file, i, g, w)
			}
		}
	}
}
