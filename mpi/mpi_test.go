package mpi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/podmpi/podmpi/hostfile"
)

func TestParseImplementation(t *testing.T) {
	tests := []struct {
		in      string
		want    Implementation
		auto    bool
		wantErr bool
	}{
		{"auto", "", true, false},
		{"", "", true, false},
		{" AUTO ", "", true, false},
		{"openmpi", OpenMPI4, true, false},
		{"OpenMPI", OpenMPI4, true, false}, // mpi-operator's spelling
		{"openmpi4", OpenMPI4, false, false},
		{"openmpi5", OpenMPI5, false, false},
		{"mpich", MPICH, false, false},
		{"MPICH", MPICH, false, false},
		{"intelmpi", IntelMPI, false, false},
		{"Intel", IntelMPI, false, false}, // mpi-operator's spelling
		{"mvapich", "", false, true},
		{"openmpi6x", "", false, true},
	}
	for _, tt := range tests {
		got, auto, err := ParseImplementation(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseImplementation(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrUnknownImplementation) || !strings.Contains(err.Error(), tt.in) {
				t.Errorf("ParseImplementation(%q) err = %v: want ErrUnknownImplementation naming the value", tt.in, err)
			}
			continue
		}
		if got != tt.want || auto != tt.auto {
			t.Errorf("ParseImplementation(%q) = %q, %v; want %q, %v", tt.in, got, auto, tt.want, tt.auto)
		}
	}
	for _, i := range Implementations {
		got, auto, err := ParseImplementation(i.String())
		if err != nil || got != i || auto {
			t.Errorf("round trip %q: got %q, %v, %v", i, got, auto, err)
		}
	}
}

func TestHostfileFormatAndDaemons(t *testing.T) {
	want := map[Implementation]struct {
		f       hostfile.Format
		daemons []string
	}{
		OpenMPI4: {hostfile.OpenMPI, []string{"orted"}},
		OpenMPI5: {hostfile.OpenMPI, []string{"prted"}},
		MPICH:    {hostfile.MPICH, []string{"hydra_pmi_proxy"}},
		IntelMPI: {hostfile.IntelMPI, []string{"hydra_bstrap_proxy", "hydra_pmi_proxy"}},
	}
	for _, i := range Implementations {
		w := want[i]
		if got := i.HostfileFormat(); got != w.f {
			t.Errorf("%s.HostfileFormat() = %v, want %v", i, got, w.f)
		}
		if got := strings.Join(i.Daemons(), ","); got != strings.Join(w.daemons, ",") {
			t.Errorf("%s.Daemons() = %v, want %v", i, got, w.daemons)
		}
		if !i.Valid() {
			t.Errorf("%s not Valid", i)
		}
	}
	if Implementation("x").Valid() || Implementation("x").Daemons() != nil {
		t.Error("unknown implementation reported valid or with daemons")
	}
}

var versionCases = []struct {
	name    string
	out     string
	impl    Implementation
	version string
}{
	{"ompi4 alternatives", "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", OpenMPI4, "4.1.4"},
	{"ompi4 debian name", "mpirun.openmpi (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", OpenMPI4, "4.1.4"},
	{"ompi3", "mpirun (Open MPI) 3.1.6\n", OpenMPI4, "3.1.6"},
	{"ompi5", "mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n", OpenMPI5, "5.0.7"},
	{"ompi5 rc", "mpirun (Open MPI) 5.1.0rc2\n", OpenMPI5, "5.1.0rc2"},
	{"ompi10", "mpirun (Open MPI) 10.0.0\n", OpenMPI5, "10.0.0"},
	{"prterun", "prterun (PRRTE) 3.0.6\n", OpenMPI5, "3.0.6"},
	{"ompi no version", "mpirun (Open MPI)\n", OpenMPI4, ""},
	{"mpich", "HYDRA build details:\n    Version:                                 4.0.2\n    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n", MPICH, "4.0.2"},
	{"mpich 3.3a2", "HYDRA build details:\n    Version:                                 3.3a2\n", MPICH, "3.3a2"},
	{"hydra no version", "HYDRA build details:\n    CC: gcc\n", MPICH, ""},
	{"intel 2021", "Intel(R) MPI Library for Linux* OS, Version 2021.13 Build 20240701 (id: 8f9b6da)\nCopyright 2003-2024, Intel Corporation.\n", IntelMPI, "2021.13"},
	{"intel 2019", "Intel(R) MPI Library for Linux* OS, Version 2019 Update 9 Build 20200923 (id: abd58e492)\n", IntelMPI, "2019 Update 9"},
	{"intel with hydra text", "Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227 (id: 28877f3f32)\nHYDRA build details:\n    Version: 4.0\n", IntelMPI, "2021.6"},
	{"leading blank lines", "\n\n  mpirun (Open MPI) 4.0.3\n", OpenMPI4, "4.0.3"},
	{"crlf", "mpirun (Open MPI) 4.1.2\r\n", OpenMPI4, "4.1.2"},
}

func TestParseVersionOutput(t *testing.T) {
	for _, tt := range versionCases {
		t.Run(tt.name, func(t *testing.T) {
			impl, v, err := ParseVersionOutput(tt.out)
			if err != nil || impl != tt.impl || v != tt.version {
				t.Errorf("ParseVersionOutput = %q, %q, %v; want %q, %q", impl, v, err, tt.impl, tt.version)
			}
		})
	}
	for _, bad := range []string{"", "GNU bash, version 5.2.15(1)-release\n", "python 3.11", "\x00\xff"} {
		if impl, v, err := ParseVersionOutput(bad); !errors.Is(err, ErrUnrecognizedVersion) {
			t.Errorf("ParseVersionOutput(%q) = %q, %q, %v; want ErrUnrecognizedVersion", bad, impl, v, err)
		}
	}
}

// TestParseVersionOutputTestdata checks the stored outputs; the *.real.txt
// files were produced on the build VM by the real programs (see
// TestDetectRealMPI, which re-runs them when installed).
func TestParseVersionOutputTestdata(t *testing.T) {
	want := map[string]struct {
		impl Implementation
		v    string
	}{
		"openmpi-4.1.4.real.txt":                     {OpenMPI4, "4.1.4"},
		"mpirun-alternatives-openmpi-4.1.4.real.txt": {OpenMPI4, "4.1.4"},
		"mpich-4.0.2.real.txt":                       {MPICH, "4.0.2"},
		"openmpi-5.0.7.txt":                          {OpenMPI5, "5.0.7"},
		"intelmpi-2021.13.txt":                       {IntelMPI, "2021.13"},
		"intelmpi-2019u9.txt":                        {IntelMPI, "2019 Update 9"},
	}
	files, err := filepath.Glob("testdata/version/*.txt")
	if err != nil || len(files) != len(want) {
		t.Fatalf("testdata/version has %d files (%v), want %d", len(files), err, len(want))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[filepath.Base(f)]
		if !ok {
			t.Errorf("unexpected testdata file %s", f)
			continue
		}
		impl, v, err := ParseVersionOutput(string(b))
		if err != nil || impl != w.impl || v != w.v {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", f, impl, v, err, w.impl, w.v)
		}
	}
}

func FuzzParseVersionOutput(f *testing.F) {
	for _, tt := range versionCases {
		f.Add(tt.out)
	}
	f.Add("Intel MPI Library Version ")
	f.Add("(Open MPI) 99999999999999999999")
	f.Fuzz(func(t *testing.T, out string) {
		impl, v, err := ParseVersionOutput(out)
		if err != nil {
			if impl != "" || v != "" {
				t.Fatalf("error with result %q %q", impl, v)
			}
			return
		}
		if !impl.Valid() {
			t.Fatalf("invalid implementation %q", impl)
		}
		if len(v) > maxVersionLen || strings.ContainsAny(v, "\r\n\t\x00") || !utf8.ValidString(v) {
			t.Fatalf("bad version %q", v)
		}
	})
}

func TestIsLauncherAndNameHint(t *testing.T) {
	for _, n := range []string{"mpirun", "/usr/bin/mpirun", "mpiexec", "mpirun.openmpi", "mpiexec.hydra", "orterun", "prterun"} {
		if !IsLauncher(n) {
			t.Errorf("IsLauncher(%q) = false", n)
		}
	}
	for _, n := range []string{"bash", "python3", "horovodrun", "mpicc", "/bin/sh"} {
		if IsLauncher(n) {
			t.Errorf("IsLauncher(%q) = true", n)
		}
	}
	hints := map[string]Implementation{
		"mpirun.openmpi": OpenMPI4, "orterun": OpenMPI4, "prterun": OpenMPI5,
		"mpiexec.hydra": MPICH, "mpirun.mpich": MPICH,
	}
	for n, want := range hints {
		if got, ok := NameHint("/nonexistent/" + n); !ok || got != want {
			t.Errorf("NameHint(%q) = %q, %v; want %q", n, got, ok, want)
		}
	}
	if _, ok := NameHint("/nonexistent/mpirun"); ok {
		t.Error("plain mpirun gave a hint")
	}
	// A symlink named mpirun pointing at mpirun.mpich gets the target's hint.
	dir := t.TempDir()
	target := filepath.Join(dir, "mpirun.mpich")
	if err := os.WriteFile(target, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "mpirun")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if got, ok := NameHint(link); !ok || got != MPICH {
		t.Errorf("NameHint(symlink to mpirun.mpich) = %q, %v", got, ok)
	}
}

// indexFold must return an index into its own argument: a search in a
// lower-cased copy mis-indexes once invalid UTF-8 changes the copy's length
// (the fuzz seed testdata/fuzz/FuzzParseVersionOutput/invalid-utf8-intel
// panicked with "slice bounds out of range").
func TestIndexFold(t *testing.T) {
	cases := []struct {
		s, sub string
		want   int
	}{
		{"Intel(R) MPI Library", "intel(r) mpi library", 0},
		{"x INTEL MPI LIBRARY", "Intel MPI Library", 2},
		{strings.Repeat("\x80", 12) + "Intel MPI Library\n", "Intel MPI Library", 12},
		{"\xff\xfeintel", "INTEL", 2},
		{"İntel", "intel", -1}, // non-ASCII letters are not folded
		{"abc", "abcd", -1},
		{"", "", 0},
		{"abc", "", 0},
	}
	for _, c := range cases {
		if got := indexFold(c.s, c.sub); got != c.want {
			t.Errorf("indexFold(%q, %q) = %d, want %d", c.s, c.sub, got, c.want)
		}
	}
	impl, _, err := ParseVersionOutput(strings.Repeat("\x80", 12) + "Intel MPI Library\n")
	if err != nil || impl != IntelMPI {
		t.Errorf("ParseVersionOutput = %q, %v; want %q", impl, err, IntelMPI)
	}
}

func TestLaunchChoiceSelects(t *testing.T) {
	c := OpenMPI4.Flavour().LaunchChoices[0]
	for v, want := range map[string]bool{
		"rsh": true, "slurm,rsh": true, " rsh ": true, "^slurm,tm": true, "^slurm, rsh": false, "isolated": false, "slurm": false, "^rsh": false,
	} {
		if got := c.Selects(v); got != want {
			t.Errorf("Selects(%q) = %v, want %v", v, got, want)
		}
	}
	if c := OpenMPI5.Flavour().LaunchChoices[0]; !c.Selects("ssh") || c.Selects("pals") {
		t.Errorf("PRRTE's ssh launcher: %+v", c)
	}
}

// FuzzLaunchChoiceSelects: any value; excluding a list selects exactly
// what including it does not.
func FuzzLaunchChoiceSelects(f *testing.F) {
	for _, s := range []string{"rsh", "^rsh", "slurm,rsh", " ^ slurm , tm ", "", ",,", "^"} {
		f.Add(s)
	}
	c := OpenMPI4.Flavour().LaunchChoices[0]
	f.Fuzz(func(t *testing.T, v string) {
		list := strings.TrimSpace(v)
		if strings.HasPrefix(list, "^") {
			return
		}
		if c.Selects(v) == c.Selects("^"+list) {
			t.Fatalf("Selects(%q) == Selects(%q)", v, "^"+list)
		}
	})
}
