package hostfile

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run `go test ./hostfile -run %s -update` to create it): %v", t.Name(), err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (re-run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Host sets as the operators produce them.
var (
	// Trainer v2, numNodes 3, numProcPerNode 2, runLauncherAsNode: the node
	// replicated job first, the launcher's own line last.
	trainerHosts = []Host{
		{"tj-node-0-0.tj", 2},
		{"tj-node-0-1.tj", 2},
		{"tj-launcher-0-0.tj", 2},
	}
	// mpi-operator v2beta1 MPIJob "pi" in namespace default, 2 workers,
	// slotsPerWorker 1.
	mpiOperatorHosts = []Host{
		{"pi-worker-0.pi.default.svc", 1},
		{"pi-worker-1.pi.default.svc", 1},
	}
)

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	sets := []struct {
		name  string
		hosts []Host
	}{
		{"trainer", trainerHosts},
		{"mpi-operator", mpiOperatorHosts},
	}
	for _, s := range sets {
		for _, f := range []Format{OpenMPI, IntelMPI, MPICH} {
			name := fmt.Sprintf("render/%s.%s.golden", s.name, strings.ToLower(f.String()))
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var buf bytes.Buffer
				if err := Render(&buf, f, s.hosts); err != nil {
					t.Fatal(err)
				}
				golden(t, name, buf.Bytes())
			})
		}
	}
}

// TestUpstreamByteCompatible proves Render writes byte-for-byte what the
// operators write (the input files copy their newConfigMap /
// buildHostFileConfigMap output), and Parse reads it back unchanged.
func TestUpstreamByteCompatible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file   string
		render Format
		parsed Format
		hosts  []Host
	}{
		{"trainer.hostfile", OpenMPI, OpenMPI, trainerHosts},
		{"mpi-operator-openmpi.hostfile", OpenMPI, OpenMPI, mpiOperatorHosts},
		{"mpi-operator-intel.hostfile", IntelMPI, MPICH, mpiOperatorHosts},
		{"mpi-operator-mpich.hostfile", MPICH, MPICH, mpiOperatorHosts},
		{"mpi-operator-openmpi-launcher-as-worker.hostfile", OpenMPI, OpenMPI,
			append([]Host{{"pi-launcher.pi.default.svc", 1}}, mpiOperatorHosts...)},
		{"mpi-operator-mpich-launcher-as-worker.hostfile", MPICH, MPICH,
			append([]Host{{"pi-launcher.pi.default.svc", 1}}, mpiOperatorHosts...)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "input", tt.file)
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := Render(&buf, tt.render, tt.hosts); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("Render(%v) = %q, upstream writes %q", tt.render, buf.Bytes(), want)
			}
			hosts, f, err := ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(hosts, tt.hosts) || f != tt.parsed {
				t.Errorf("ParseFile = %v, %v; want %v, %v", hosts, f, tt.hosts, tt.parsed)
			}
		})
	}
}

// dumpParse renders a Parse result as text for a golden file.
func dumpParse(hosts []Host, f Format) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "format: %s\nhosts: %d\ntotal slots: %d\n", f, len(hosts), TotalSlots(hosts))
	for _, h := range hosts {
		if h.Slots == 0 {
			fmt.Fprintf(&b, "%s\t(slots not given)\n", h.Name)
		} else {
			fmt.Fprintf(&b, "%s\tslots=%d\n", h.Name, h.Slots)
		}
	}
	return b.Bytes()
}

// TestParseGolden parses every file in testdata/input (the exact upstream
// files and commented, hand-edited variants) into testdata/parse/*.golden.
func TestParseGolden(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("testdata", "input", "*.hostfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 8 {
		t.Fatalf("found %d input files, want at least 8", len(inputs))
	}
	for _, in := range inputs {
		base := strings.TrimSuffix(filepath.Base(in), ".hostfile")
		t.Run(base, func(t *testing.T) {
			t.Parallel()
			hosts, f, err := ParseFile(in)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "parse/"+base+".golden", dumpParse(hosts, f))
		})
	}
}

// TestErrorMessagesGolden keeps every user-facing parse error in one file
// so reviewers can read the wording; each must name the file and line.
func TestErrorMessagesGolden(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in string }{
		{"underscore", "tj-node-0-0.tj slots=2\ntj_node-0-1.tj slots=2\n"},
		{"long label", strings.Repeat("n", 64) + ".tj slots=1\n"},
		{"ipv6", "fd00::1 slots=1\n"},
		{"slots zero", "tj-node-0-0.tj slots=0\n"},
		{"slots text", "tj-node-0-0.tj slots=two\n"},
		{"slots overflow", "pi-worker-0.pi.default.svc:4294967297\n"},
		{"max below slots", "a slots=4 max_slots=2\n"},
		{"mixed", "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc:1\n"},
		{"hydra option", "pi-worker-0.pi.default.svc:1 ifhn=eth0\n"},
		{"user at host", "mpiuser@pi-worker-0 slots=1\n"},
		{"unknown key", "a Slots=2\n"},
		{"stray word", "a 2\n"},
		{"empty", "# nothing here\n\n"},
	}
	var b bytes.Buffer
	for _, c := range cases {
		_, _, err := parse(strings.NewReader(c.in), "/etc/mpi/hostfile")
		if err == nil {
			t.Fatalf("%s: Parse(%q) succeeded, want an error", c.name, c.in)
		}
		if !strings.HasPrefix(err.Error(), "hostfile /etc/mpi/hostfile") {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
		fmt.Fprintf(&b, "== %s\ninput: %q\nerror: %s\n\n", c.name, c.in, err)
	}
	golden(t, "errors.golden", b.Bytes())
}
