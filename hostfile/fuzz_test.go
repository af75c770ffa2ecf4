package hostfile

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// seedInputs are the table inputs of the package's tests plus the upstream
// files, so fuzzing starts from every form the parser knows.
func seedInputs() []string {
	seeds := []string{
		"tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-launcher-0-0.tj slots=2\n",
		"pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n",
		"pi-worker-0.pi.default.svc:1\npi-worker-1.pi.default.svc:1\n",
		"# c\n\n\ta slots = 2 # t\r\nb max_slots=3\nb\nc count=1 max-slots=4\n",
		"a\na:3\n10.0.0.1:2\n",
		"a slots=1\nb:1\n",
		"a slots=0\n", "a:99999999999\n", "fe80::1:2\n", "^a\n", "+n0\n", "u@a\n",
		"a:2 ifhn=eth0\n", "slots=2\n", "a b\n", "A.b.\na.B slots=2\n", "",
	}
	return seeds
}

// FuzzParse checks that Parse never panics, that accepted input is valid
// (names pass ValidateName, slots in 0..MaxSlots, no duplicates), and that
// Render then Parse round-trips to the same hosts for every format.
func FuzzParse(f *testing.F) {
	for _, s := range seedInputs() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, _, err := Parse(strings.NewReader(in))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError: %v", err, err)
			}
			if hosts != nil {
				t.Fatalf("hosts %v returned with error %v", hosts, err)
			}
			return
		}
		if len(hosts) == 0 {
			t.Fatal("Parse accepted input without hosts")
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if err := ValidateName(h.Name); err != nil {
				t.Fatalf("Parse accepted invalid name: %v", err)
			}
			if h.Slots < 0 || h.Slots > MaxSlots {
				t.Fatalf("Parse accepted slots %d", h.Slots)
			}
			if seen[nameKey(h.Name)] {
				t.Fatalf("duplicate host %q in result", h.Name)
			}
			seen[nameKey(h.Name)] = true
		}
		filled := WithDefaultSlots(hosts, 1)
		for _, format := range []Format{OpenMPI, IntelMPI, MPICH} {
			var buf bytes.Buffer
			if err := Render(&buf, format, filled); err != nil {
				t.Fatalf("Render(%v, %v) of parsed hosts: %v", format, filled, err)
			}
			again, f2, err := Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("Parse of rendered %v output %q: %v", format, buf.Bytes(), err)
			}
			if !reflect.DeepEqual(again, filled) {
				t.Fatalf("round trip through %v: got %v, want %v", format, again, filled)
			}
			want := OpenMPI
			if format != OpenMPI {
				want = MPICH
			}
			if f2 != want {
				t.Fatalf("rendered %v detected as %v", format, f2)
			}
		}
	})
}

// FuzzValidateName checks that ValidateName never panics and that every
// accepted name is safe to write to a hostfile and reads back unchanged.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"tj-node-0-0.tj", "pi-worker-0.pi.default.svc.cluster.local.", "10.244.1.7", "a_b", "-a", "a-",
		"fe80::1", "[::1]", "1.2.3.999", "010.1.1.1", "123", "a..b", ".", "", "nöde", strings.Repeat("a", 64),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("error does not wrap ErrInvalidName: %v", err)
			}
			return
		}
		if len(name) > maxNameLen+1 || strings.ContainsAny(name, " \t\r\n#:=@_") {
			t.Fatalf("accepted unsafe name %q", name)
		}
		for _, format := range []Format{OpenMPI, MPICH} {
			var buf bytes.Buffer
			if err := Render(&buf, format, []Host{{name, 1}}); err != nil {
				t.Fatalf("Render(%q): %v", name, err)
			}
			hosts, _, err := Parse(&buf)
			if err != nil || len(hosts) != 1 || hosts[0] != (Host{name, 1}) {
				t.Fatalf("round trip of %q through %v: %v, %v", name, format, hosts, err)
			}
		}
	})
}
