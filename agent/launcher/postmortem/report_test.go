package postmortem

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/mpi"
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
	reports, _ := collectPlaced(t, out, chunk)
	return reports
}

// collectPlaced is collect with the ranks' reported hosts.
func collectPlaced(t *testing.T, out string, chunk int) ([]Report, map[int][]string) {
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
	return c.Reports(), c.Placed()
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
		// MPICH's EXIT CODE is the wait status of a process a signal
		// ended: 4 is SIGILL, 137 SIGKILL with a core dump.
		{"hydra wait status, cut short", "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 9 RUNNING AT h\n=   EXIT CODE: 4\n",
			[]Report{{Kind: ReportSignal, Rank: -1, PID: 9, Host: "h", Signal: 4, ExitCode: -1}}},
		{"hydra wait status with a core dump", "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 9 RUNNING AT h\n=   EXIT CODE: 139\n",
			[]Report{{Kind: ReportSignal, Rank: -1, PID: 9, Host: "h", Signal: 11, ExitCode: -1}}},
		{"intel mpi block", "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 2 PID 9 RUNNING AT h\n=   KILLED BY SIGNAL: 9 (Killed)\n",
			[]Report{{Kind: ReportSignal, Rank: 2, PID: 9, Host: "h", Signal: 9, ExitCode: -1}}},
		{"hydra block that never says", "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 9 RUNNING AT h\n", nil},
		{"prrte signal on the next line", "prterun noticed that process rank 1 with PID 25891 on node x5-node-0-0 exited on\nsignal 9 (Killed).\n",
			[]Report{{Kind: ReportSignal, Rank: 1, PID: 25891, Host: "x5-node-0-0", Signal: 9, ExitCode: -1}}},
		{"mpich exit codes", "[mpiexec@l] Exit codes: [w-0.j] 0,1280\n[w-1.j] 9,139\n[l] 0\n", []Report{
			{Kind: ReportExit, Rank: -1, Host: "w-0.j", ExitCode: 5}, {Kind: ReportSignal, Rank: -1, Host: "w-1.j", Signal: 9, ExitCode: -1},
			{Kind: ReportSignal, Rank: -1, Host: "w-1.j", Signal: 11, ExitCode: -1}}},
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

// TestPlaced: Open MPI's reports of each rank's binding, by the daemon that
// starts it, give each rank's host; reports that contradict each other are
// kept as such (two hosts), and the ranks kept are bounded.
func TestPlaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want map[int][]string
	}{
		{"open mpi 4", "[w-0:4242] MCW rank 3 is not bound (or bound to all available processors)\n", map[int][]string{3: {"w-0"}}},
		{"open mpi 4 bound", "[w-0:4242] MCW rank 0 bound to socket 0[core 0[hwt 0]]: [B/.]\n", map[int][]string{0: {"w-0"}}},
		{"open mpi 5", "[w-1:77] Rank 12 bound to package[0][core:0]\n", map[int][]string{12: {"w-1"}}},
		{"tagged", "[1,3]<stderr>:[w-2:1] MCW rank 3 is not bound\n", map[int][]string{3: {"w-2"}}},
		{"contradictions", "[w-1:77] Rank 2 bound to x\n[W-1:78] Rank 2 bound to y\n[w-2:9] Rank 2 bound to z\n[w-3:9] Rank 2 bound to z\n",
			map[int][]string{2: {"w-1", "w-2"}}},
		{"not a report", "[w-1:77] Rank 2 is fine\nRank 3 bound to x\n", map[int][]string{}},
	} {
		_, got := collectPlaced(t, tc.out, 3)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: placed %v, want %v", tc.name, got, tc.want)
		}
	}
	var many strings.Builder
	for r := range maxPlaced + 10 {
		fmt.Fprintf(&many, "[w:1] Rank %d bound to x\n", r)
	}
	if _, got := collectPlaced(t, many.String(), 1<<20); len(got) != maxPlaced {
		t.Errorf("%d ranks placed, want %d", len(got), maxPlaced)
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

// TestAskedLinesLeftOut: the lines the launcher asked mpirun for (Open
// MPI's binding reports, Hydra's list of exit codes) are read and left out
// of what passes, whole, in real output of each MPI (testdata), however the
// output is cut into writes; everything else passes as it was.
func TestAskedLinesLeftOut(t *testing.T) {
	bindings, codes := Asked{Bindings: true}, Asked{ExitCodes: true}
	for _, tc := range []struct {
		file   string
		impl   mpi.Implementation
		asked  Asked
		drop   []int // the lines left out, from 0
		placed int   // binding reports read
	}{
		{"ompi4.1-launcher-as-node-rank1-exit5.txt", mpi.OpenMPI4, bindings, []int{1, 2, 3}, 3},
		{"ompi4.1-tag-output-rank1-exit5.txt", mpi.OpenMPI4, bindings, []int{0, 1, 2}, 3},
		{"ompi4.1-bind-to-core-rank1-exit5.txt", mpi.OpenMPI4, bindings, []int{0, 1, 2}, 3},
		{"ompi5.0-launcher-as-node-rank1-exit5.txt", mpi.OpenMPI5, bindings, []int{1, 2, 4}, 3},
		{"mpich4.0-launcher-as-node-rank1-exit5.txt", mpi.MPICH, codes, []int{3, 4, 5}, 0},
		{"mpich4.0-rank1-sigsegv.txt", mpi.MPICH, codes, []int{13, 14}, 0},
		{"mpich4.0-mpi-rank1-exit5-cleanup.txt", mpi.MPICH, codes, []int{9}, 0},
		{"intelmpi2021.19-mpi-rank1-exit5.txt", mpi.IntelMPI, codes, []int{15}, 0},
		// Asked for nothing: nothing is left out.
		{"ompi4.1-launcher-as-node-rank1-exit5.txt", mpi.OpenMPI4, Asked{}, nil, 3},
		{"mpich4.0-launcher-as-node-rank1-exit5.txt", mpi.MPICH, bindings, nil, 0},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(b), "\n")
		var want strings.Builder
		for i, l := range lines {
			if !slices.Contains(tc.drop, i) {
				want.WriteString(l)
			}
		}
		for _, chunk := range []int{1, 5, 64, len(b)} {
			c := NewCollector(nil)
			c.Expect(tc.impl, tc.asked)
			var sink bytes.Buffer
			w := c.Writer(&sink)
			for i := 0; i < len(b); i += chunk {
				if n, err := w.Write(b[i:min(i+chunk, len(b))]); err != nil || n != min(chunk, len(b)-i) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			c.Flush(w)
			if sink.String() != want.String() {
				t.Errorf("%s (asked %+v, chunks of %d): passed\n%s\nwant\n%s", tc.file, tc.asked, chunk, sink.String(), want.String())
			}
			if placed := len(c.Placed()); placed != tc.placed {
				t.Errorf("%s: %d binding reports read, want %d", tc.file, placed, tc.placed)
			}
		}
	}
}

// TestHeldLinesPassWhenTheyDiffer: a line that starts like one of the
// launcher's (a '[') passes as soon as it differs, without waiting for its
// end: a prompt without a newline is not held back. One that is the
// launcher's is dropped from the moment it is known, and Hydra's list is
// held to its line's end.
func TestHeldLinesPassWhenTheyDiffer(t *testing.T) {
	c := NewCollector(nil)
	c.Expect(mpi.OpenMPI4, Asked{Bindings: true, ExitCodes: true})
	var sink bytes.Buffer
	w := c.Writer(&sink)
	for _, step := range []struct{ write, passes string }{
		{"[y/N] ", "[y/N] "},
		{"\n[w-0:12] MCW", "\n"},
		{" rank 3 bound to", ""},
		{" socket 0\n[1,0]<stdout>:step 1\n", "[1,0]<stdout>:step 1\n"},
		{"[mpiexec@l] Exit codes: [a] 0", ""},
		{" and more", ""},
	} {
		before := sink.Len()
		if _, err := w.Write([]byte(step.write)); err != nil {
			t.Fatal(err)
		}
		if got := sink.String()[before:]; got != step.passes {
			t.Errorf("after %q, %q passed; want %q", step.write, got, step.passes)
		}
	}
	c.Flush(w)
	if got, want := sink.String(), "[y/N] \n[1,0]<stdout>:step 1\n[mpiexec@l] Exit codes: [a] 0 and more"; got != want {
		t.Errorf("after Flush: %q, want %q", got, want)
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

// FuzzAskedLines: with the launcher's own lines asked for, what passes is
// the output less whole lines, each one of them.
func FuzzAskedLines(f *testing.F) {
	for _, s := range []string{"[w-0:1] MCW rank 3 is not bound\nx\n", "[1,2]<stderr>:[h:9] Rank 2 bound to c\n",
		"[mpiexec@l] Exit codes: [a] 0,1280\n[b:1] 137\nYOUR\n", "[y/N] ", "[a] 5\n"} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		chunk = max(1, chunk%64+1)
		c := NewCollector(nil)
		c.Expect(mpi.MPICH, Asked{Bindings: true, ExitCodes: true})
		var sink bytes.Buffer
		w := c.Writer(&sink)
		for i := 0; i < len(data); i += chunk {
			_, _ = w.Write(data[i:min(i+chunk, len(data))])
		}
		c.Flush(w)
		out := sink.String()
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if rest, ok := strings.CutPrefix(out, l); ok && l != "" {
				out = rest
				continue
			}
			ours := strings.Contains(l, "] MCW rank ") || strings.Contains(l, "] Rank ") || strings.Contains(l, "] Exit codes:") ||
				exitCodesEntryRe.MatchString(strings.TrimRight(l, "\r\n"))
			if !ours && l != "" {
				t.Fatalf("line %q was changed or left out; passed %q", l, sink.String())
			}
		}
		if out != "" {
			t.Fatalf("%q passed that was not given", out)
		}
	})
}

// reportsOf collects what the Collector reads in testdata/name, as if the
// launcher read every line at when.
func reportsOf(t *testing.T, name string, when time.Time) []Report {
	t.Helper()
	return reportsOfMPI(t, name, "", when)
}

// reportsOfMPI is reportsOf for output of impl.
func reportsOfMPI(t *testing.T, name string, impl mpi.Implementation, when time.Time) []Report {
	t.Helper()
	reports, _ := collectedOf(t, name, impl, when)
	return reports
}

// collectedOf is reportsOfMPI with the ranks' reported hosts.
func collectedOf(t *testing.T, name string, impl mpi.Implementation, when time.Time) ([]Report, map[int][]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(func() time.Time { return when })
	c.Expect(impl, Asked{})
	w := c.Writer(io.Discard)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	c.Flush(w)
	return c.Reports(), c.Placed()
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
		// Open MPI 5's PRRTE (3.0) breaks its line before the signal
		// (TestDiagnosisHostFromEvidence's pods, 2 workers and the
		// launcher's own pod, 1 slot each).
		{"ompi5.0-rank1-sigkill.txt", []Report{{Kind: ReportSignal, Rank: 1, PID: 25891, Host: "x5-node-0-0", Signal: 9, ExitCode: -1}}},
	} {
		got := reportsOf(t, tc.file, time.Unix(1, 0))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d reports %+v, want %d", tc.file, len(got), got, len(tc.want))
		}
		for i, w := range tc.want {
			if g := got[i]; g.Kind != w.Kind || g.Rank != w.Rank || g.PID != w.PID || g.Host != w.Host || g.Signal != w.Signal || g.ExitCode != w.ExitCode {
				t.Errorf("%s: report %d = %+v, want %+v", tc.file, i, g, w)
			}
		}
	}
}
