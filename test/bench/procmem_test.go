package bench

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestParseRollup(t *testing.T) {
	in := "55d0-7ff [rollup]\nRss:                4096 kB\nPss:                1030 kB\nPss_Anon:  1 kB\n"
	m, err := parseRollup([]byte(in))
	if err != nil || m.RSS != 4096*1024 || m.PSS != 1030*1024 {
		t.Errorf("parseRollup = %+v, %v", m, err)
	}
	for _, bad := range []string{"", "Rss: x kB\nPss: 1 kB\n", "Rss: 1 kB\n"} {
		if _, err := parseRollup([]byte(bad)); err == nil {
			t.Errorf("parseRollup(%q) = nil error", bad)
		}
	}
}

func TestParseStat(t *testing.T) {
	p, ok := parseStat(7, []byte("7 (a (b) c) S 1 7 7 0"))
	if !ok || p.PPID != 1 || p.Comm != "a (b) c" {
		t.Errorf("parseStat = %+v %v", p, ok)
	}
	if _, ok := parseStat(7, []byte("7 (x) Z 1 7")); ok {
		t.Error("zombie reported")
	}
	if _, ok := parseStat(7, []byte("7 (x")); ok {
		t.Error("truncated stat accepted")
	}
}

func TestProcsAndMem(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 5 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var kids []int
	for range 100 {
		table, err := Procs()
		if err != nil {
			t.Fatal(err)
		}
		if kids = Descendants(table, os.Getpid()); len(kids) >= 2 {
			break
		}
		exec.Command("/bin/sleep", "0.02").Run()
	}
	if !slices.Contains(kids, cmd.Process.Pid) || len(kids) < 2 {
		t.Fatalf("descendants %v lack the shell %d and its sleep", kids, cmd.Process.Pid)
	}
	m, err := ReadMem(os.Getpid())
	if err != nil || m.RSS <= 0 || m.PSS <= 0 || m.PSS > m.RSS {
		t.Errorf("ReadMem(self) = %+v, %v", m, err)
	}
}

func TestParseLauncherLog(t *testing.T) {
	lines := []string{
		`{"time":"x","level":"INFO","msg":"phase done","phase":"discovery","seconds":0.0021,"ok":true}`,
		`{"time":"x","level":"INFO","msg":"phase done","phase":"probe","seconds":0.01,"ok":true}`,
		`not json`,
		`{"time":"x","level":"INFO","msg":"running","argv0":"/bin/true","args":0,"init_seconds":0.015}`,
	}
	r, err := ParseLauncherLog(lines)
	if err != nil || r.Init != 0.015 || r.Phases["probe"] != 0.01 || !slices.Equal(r.Order, []string{"discovery", "probe"}) {
		t.Errorf("ParseLauncherLog = %+v, %v", r, err)
	}
	if _, err := ParseLauncherLog(lines[:2]); err == nil {
		t.Error("no init record: nil error")
	}
}

func FuzzParseLauncherLog(f *testing.F) {
	f.Add(`{"msg":"phase done","phase":"probe","seconds":0.01}`)
	f.Add(`{"msg":"running","init_seconds":1}`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseLauncherLog([]string{s, s})
		_, _ = parseRollup([]byte(s))
		_, _ = parseStat(1, []byte(s))
		_, _ = parseStatCPU([]byte(s))
	})
}

func TestParseStatCPU(t *testing.T) {
	line := "42 (w a) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 123 0 0"
	if got, err := parseStatCPU([]byte(line)); err != nil || got != 3 {
		t.Errorf("parseStatCPU = %v, %v, want 3 s", got, err)
	}
	if _, err := parseStatCPU([]byte("42 (x) S 1")); err == nil {
		t.Error("short stat accepted")
	}
	if c, err := ProcCPU(os.Getpid()); err != nil || c < 0 {
		t.Errorf("ProcCPU(self) = %v, %v", c, err)
	}
}

// TreeFootprint counts a child holding extra descriptors.
func TestTreeFootprint(t *testing.T) {
	var extra []*os.File
	for range 20 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		extra = append(extra, f)
	}
	cmd := exec.Command("/bin/sleep", "5")
	cmd.ExtraFiles = extra
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var fp Footprint
	for range 100 {
		table, err := Procs()
		if err != nil {
			t.Fatal(err)
		}
		if fp = TreeFootprint(table, os.Getpid()); fp.Procs >= 2 {
			break
		}
		exec.Command("/bin/sleep", "0.02").Run()
	}
	self, _ := CountFDs(os.Getpid())
	if fp.Procs < 2 || fp.FDs < self+23 || fp.Mem.RSS <= 0 || fp.MaxFDs < 23 {
		t.Fatalf("footprint %+v (self %d fds)", fp, self)
	}
	peak := Footprint{Procs: 1, FDs: 1 << 20}.Peak(fp)
	if peak.Procs != fp.Procs || peak.FDs != 1<<20 || peak.Mem != fp.Mem {
		t.Errorf("Peak = %+v", peak)
	}
}
