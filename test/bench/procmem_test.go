package bench

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

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
	})
}

func TestProcCPU(t *testing.T) {
	if c, err := ProcCPU(os.Getpid()); err != nil || c < 0 {
		t.Errorf("ProcCPU(self) = %v, %v", c, err)
	}
}
