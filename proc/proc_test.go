package proc

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/proc/proctest"
)

func TestParseStat(t *testing.T) {
	st, err := ParseStat([]byte(proctest.StatLine(42, "a) (b", 'Z', 7, 1234, 99, 0x8b)))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 42, Comm: "a) (b", State: 'Z', PPID: 7, Start: 1234, RSS: 99, ExitStatus: 0x8b}
	if st != want || !st.Exited() {
		t.Errorf("ParseStat = %+v, want %+v", st, want)
	}
	// A kernel older than 3.5 has no exit_code field.
	short := strings.Join(strings.Fields(proctest.StatLine(1, "init", 'S', 0, 5, 1, 0))[:44], " ")
	if st, err := ParseStat([]byte(short)); err != nil || st.ExitStatus != -1 || st.Exited() {
		t.Errorf("44 fields: %+v, %v; want ExitStatus -1", st, err)
	}
	for _, bad := range []string{"", "42", "x (a) S 1", "42 (a) S x 0", ") 42 (", "-1 (a) S 1 " + strings.Repeat("0 ", 30)} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) = nil error", bad)
		}
	}
}

// TestReadStatThisProcess reads the test's own stat.
func TestReadStatThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip(err)
	}
	st, err := ReadStat("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() || st.RSS == 0 || st.Start == 0 || st.Exited() {
		t.Errorf("ReadStat(own pid) = %+v", st)
	}
	all, err := All("")
	if err != nil || !slices.ContainsFunc(all, func(s Stat) bool { return s.PID == os.Getpid() && s.Start == st.Start }) {
		t.Errorf("All() = %d processes, %v; want this one among them", len(all), err)
	}
}

// TestDescendants walks a fixture tree: parents before children, the
// bound, nothing outside the root's tree, no loop on a cycle of parent
// links (pid reuse between two reads can make one).
func TestDescendants(t *testing.T) {
	p := proctest.New(t)
	p.Write(1, "init", 'S', 0, 1, 0)
	p.Write(10, "agent", 'S', 1, 1, 0)
	p.Write(11, "orted", 'S', 10, 1, 0)
	p.Write(12, "rank", 'R', 11, 1, 0)
	p.Write(13, "rank", 'Z', 11, 0, 9)
	p.Write(20, "other", 'S', 1, 1, 0)
	p.Write(30, "a", 'S', 31, 1, 0)
	p.Write(31, "b", 'S', 30, 1, 0)
	all, err := All(p.Path)
	if err != nil || len(all) != 8 {
		t.Fatalf("All = %d processes, %v", len(all), err)
	}
	pids := func(sts []Stat) []int {
		var out []int
		for _, s := range sts {
			out = append(out, s.PID)
		}
		return out
	}
	got := pids(Descendants(all, 10, 0))
	if len(got) != 3 || got[0] != 11 || !slices.Contains(got, 12) || !slices.Contains(got, 13) {
		t.Errorf("Descendants(10) = %v, want 11 then 12 and 13", got)
	}
	if got := Descendants(all, 10, 2); len(got) != 2 {
		t.Errorf("Descendants(10, limit 2) = %v", pids(got))
	}
	if got := pids(Descendants(all, 30, 0)); len(got) != 1 || got[0] != 31 {
		t.Errorf("Descendants(30) over a cycle = %v, want 31 once", got)
	}
	if st, err := ReadStat(p.Path, 13); err != nil || !st.Exited() || st.ExitStatus != 9 {
		t.Errorf("ReadStat(13) = %+v, %v; want a zombie with status 9", st, err)
	}
	if _, err := ReadStat(p.Path, 99); err == nil || !strings.Contains(err.Error(), "99") {
		t.Errorf("ReadStat(99) = %v; want the missing file named", err)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(proctest.StatLine(42, "a) (b", 'Z', 7, 1234, 99, 0x8b)))
	f.Add([]byte("1 (init) S 0"))
	f.Add([]byte("1 () R"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err == nil && (st.PID <= 0 || st.ExitStatus < -1) {
			t.Fatalf("ParseStat(%q) = %+v", data, st)
		}
	})
}
