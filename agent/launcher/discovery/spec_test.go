package discovery

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/hostfile"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveWorkersFlag(t *testing.T) {
	t.Parallel()
	plan, err := Resolve(Spec{
		Workers:  []string{"tj-node-0-0.tj=2, tj-node-0-1.tj", "tj-launcher-0-0.tj=1", ""},
		Hostfile: "/does/not/matter",
		Self:     "tj-launcher-0-0",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 2}, {Name: "tj-node-0-1.tj"}, {Name: "tj-launcher-0-0.tj", Slots: 1}}
	if plan.Source != SourceWorkersFlag || !reflect.DeepEqual(plan.Hosts, want) {
		t.Fatalf("plan = %+v, want workers-flag %v", plan, want)
	}
	if plan.SelfIndex != 2 {
		t.Errorf("SelfIndex = %d, want 2", plan.SelfIndex)
	}
	if !reflect.DeepEqual(plan.Ignored, []Source{SourceHostfile}) {
		t.Errorf("Ignored = %v, want [hostfile]", plan.Ignored)
	}

	// A name without a count keeps 0 ("not given"): agent/launcher/slots
	// decides it.
	plan, err = Resolve(Spec{Workers: []string{"a=3", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []hostfile.Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 0}}
	if !reflect.DeepEqual(plan.Hosts, want) || plan.SelfIndex != -1 {
		t.Fatalf("without a count: %+v, want %v and SelfIndex -1", plan, want)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		spec    Spec
		is      error
		flag    string
		message string
	}{
		{"underscore", Spec{Workers: []string{"a_b"}}, hostfile.ErrInvalidName, "--workers", "a_b"},
		{"zero slots", Spec{Workers: []string{"a=0"}}, hostfile.ErrInvalidSlots, "--workers", "1.."},
		{"word slots", Spec{Workers: []string{"a=x"}}, hostfile.ErrInvalidSlots, "--workers", "integer"},
		{"huge slots", Spec{Workers: []string{"a=99999999999999999999"}}, hostfile.ErrInvalidSlots, "--workers", ""},
		{"hydra colon", Spec{Workers: []string{"a:2"}}, hostfile.ErrInvalidName, "--workers", "name=N"},
		{"duplicate", Spec{Workers: []string{"a.tj,A.tj."}}, hostfile.ErrDuplicateHost, "--workers", "already listed"},
		{"ipv6", Spec{Workers: []string{"fd00::1"}}, hostfile.ErrInvalidName, "--workers", "IPv6"},
		{"octal trap", Spec{Workers: []string{"010.1.1.1"}}, hostfile.ErrInvalidName, "--workers", ""},
		{"no placeholder", Spec{Template: "tj-node-0-0.tj", Expected: 2}, nil, "--discovery.template", "placeholder"},
		{"unknown placeholder", Spec{Template: "tj-node-{j}-{i}.tj", Expected: 2}, nil, "--discovery.template", "only {i}"},
		{"template without count", Spec{Template: "tj-node-0-{i}.tj"}, nil, "--discovery.template", "--workers-expected"},
		{"template bad name", Spec{Template: "tj_node-{i}.tj", Expected: 1}, hostfile.ErrInvalidName, "--discovery.template", ""},
		{"bad service", Spec{Service: "tj svc"}, hostfile.ErrInvalidName, "--discovery.service", ""},
		{"bad srv service", Spec{Service: "_ssh._tcp.-x"}, hostfile.ErrInvalidName, "--discovery.service", ""},
		{"nothing", Spec{}, ErrNoSource, "discovery", "/etc/mpi/hostfile"},
		{"expected too large", Spec{Template: "w-{i}", Expected: MaxExpected + 1}, nil, "--workers-expected", ""},
		{"missing hostfile", Spec{Hostfile: "/nonexistent/podmpi/hostfile"}, fs.ErrNotExist, "--hostfile", "drop --hostfile"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Resolve(tc.spec)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Resolve(%+v) error = %v, want *SpecError", tc.spec, err)
			}
			if se.Flag != tc.flag {
				t.Errorf("Flag = %q, want %q (error %v)", se.Flag, tc.flag, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not mention %q", err, tc.message)
			}
		})
	}
}

func TestResolveHostfile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		content string
		self    string
		hosts   []hostfile.Host
		format  hostfile.Format
		selfIdx int
	}{
		{
			// Trainer v2 with runLauncherAsNode: node lines first, the launcher's last.
			name:    "trainer runLauncherAsNode",
			content: "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-launcher-0-0.tj slots=2\n",
			self:    "tj-launcher-0-0",
			hosts:   []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 2}, {Name: "tj-node-0-1.tj", Slots: 2}, {Name: "tj-launcher-0-0.tj", Slots: 2}},
			format:  hostfile.OpenMPI,
			selfIdx: 2,
		},
		{
			name:    "trainer launcher not a node",
			content: "tj-node-0-0.tj slots=8\ntj-node-0-1.tj slots=8\n",
			self:    "tj-launcher-0-0",
			hosts:   []hostfile.Host{{Name: "tj-node-0-0.tj", Slots: 8}, {Name: "tj-node-0-1.tj", Slots: 8}},
			format:  hostfile.OpenMPI,
			selfIdx: -1,
		},
		{
			// mpi-operator OpenMPI with runLauncherAsWorker: launcher first, FQDNs.
			name:    "mpi-operator openmpi",
			content: "pi-launcher.pi.default.svc slots=1\npi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n",
			self:    "pi-launcher",
			hosts:   []hostfile.Host{{Name: "pi-launcher.pi.default.svc", Slots: 1}, {Name: "pi-worker-0.pi.default.svc", Slots: 1}, {Name: "pi-worker-1.pi.default.svc", Slots: 1}},
			format:  hostfile.OpenMPI,
			selfIdx: 0,
		},
		{
			name:    "mpi-operator intel/mpich",
			content: "pi-worker-0.pi.default.svc.cluster.local:4\npi-worker-1.pi.default.svc.cluster.local:4\n",
			self:    "pi-launcher",
			hosts:   []hostfile.Host{{Name: "pi-worker-0.pi.default.svc.cluster.local", Slots: 4}, {Name: "pi-worker-1.pi.default.svc.cluster.local", Slots: 4}},
			format:  hostfile.MPICH,
			selfIdx: -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tc.content)
			plan, err := Resolve(Spec{Hostfile: path, Service: "ignored", Self: tc.self})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Source != SourceHostfile || plan.Format != tc.format || !reflect.DeepEqual(plan.Hosts, tc.hosts) {
				t.Errorf("plan = %+v, want hostfile %v %v", plan, tc.format, tc.hosts)
			}
			if plan.SelfIndex != tc.selfIdx {
				t.Errorf("SelfIndex = %d, want %d", plan.SelfIndex, tc.selfIdx)
			}
			if !reflect.DeepEqual(plan.Ignored, []Source{SourceSRV}) {
				t.Errorf("Ignored = %v", plan.Ignored)
			}
		})
	}

	t.Run("bare names keep 0 slots", func(t *testing.T) {
		t.Parallel()
		plan, err := Resolve(Spec{Hostfile: writeFile(t, "a\nb slots=2\n")})
		if err != nil {
			t.Fatal(err)
		}
		if want := []hostfile.Host{{Name: "a"}, {Name: "b", Slots: 2}}; !reflect.DeepEqual(plan.Hosts, want) {
			t.Errorf("hosts = %v, want %v", plan.Hosts, want)
		}
	})
	t.Run("malformed names the line", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "a slots=1\nb_c slots=1\n")
		_, err := Resolve(Spec{Hostfile: path})
		var pe *hostfile.ParseError
		if !errors.As(err, &pe) || pe.Line != 2 || !strings.Contains(err.Error(), path) {
			t.Fatalf("error = %v, want a ParseError at %s:2", err, path)
		}
	})
}

func TestExpandTemplate(t *testing.T) {
	t.Parallel()
	hosts, err := ExpandTemplate("tj-node-0-{i}.tj", 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []hostfile.Host{{Name: "tj-node-0-0.tj"}, {Name: "tj-node-0-1.tj"}, {Name: "tj-node-0-2.tj"}}; !reflect.DeepEqual(hosts, want) {
		t.Errorf("{i}: %v, want %v", hosts, want)
	}
	hosts, err = ExpandTemplate("pi-worker-{i+1}.pi.default.svc", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []hostfile.Host{{Name: "pi-worker-1.pi.default.svc"}, {Name: "pi-worker-2.pi.default.svc"}}; !reflect.DeepEqual(hosts, want) {
		t.Errorf("{i+1}: %v, want %v", hosts, want)
	}
	plan, err := Resolve(Spec{Template: "tj-node-0-{i}.tj", Expected: 2, Service: "", Self: "tj-launcher-0-0"})
	if err != nil || plan.Source != SourceTemplate || plan.Hosts[1].Slots != 0 || plan.SelfIndex != -1 {
		t.Errorf("Resolve(template) = %+v, %v", plan, err)
	}
}

func TestResolveService(t *testing.T) {
	t.Parallel()
	for _, svc := range []string{"tj", "tj.default.svc.cluster.local", "_ssh._tcp.tj", "_mpi._tcp.tj.default.svc."} {
		plan, err := Resolve(Spec{Service: svc, Template: "x-{i}", Expected: 2})
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		if plan.Source != SourceSRV || len(plan.Hosts) != 0 || plan.SelfIndex != -1 ||
			!reflect.DeepEqual(plan.Ignored, []Source{SourceTemplate}) {
			t.Errorf("%s: plan = %+v", svc, plan)
		}
	}
}

func TestFindSelf(t *testing.T) {
	t.Parallel()
	hosts := []hostfile.Host{{Name: "tj-node-0-0.tj"}, {Name: "tj-launcher-0-0.tj"}, {Name: "TJ-NODE-0-1.tj."}}
	cases := []struct {
		self string
		want int
	}{
		{"", -1},
		{"tj-launcher-0-0", 1},
		{"tj-launcher-0-0.tj", 1},
		{"TJ-Launcher-0-0.tj.", 1},
		{"tj-launcher-0-0.tj.default.svc.cluster.local", 1},
		{"tj-node-0-1.tj", 2},
		{"tj-launcher", -1},
		{"tj", -1},
		{"other", -1},
	}
	for _, tc := range cases {
		if got := FindSelf(tc.self, hosts); got != tc.want {
			t.Errorf("FindSelf(%q) = %d, want %d", tc.self, got, tc.want)
		}
	}
	// An exact match beats an earlier label-prefix match.
	if got := FindSelf("a.b", []hostfile.Host{{Name: "a.b.c"}, {Name: "a.b"}}); got != 1 {
		t.Errorf("exact match: %d, want 1", got)
	}
}

func TestPresentHostfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if p, err := PresentHostfile(filepath.Join(dir, "none")); p != "" || err != nil {
		t.Errorf("missing: %q, %v", p, err)
	}
	f := writeFile(t, "a\n")
	if p, err := PresentHostfile(f); p != f || err != nil {
		t.Errorf("present: %q, %v", p, err)
	}
	if _, err := PresentHostfile(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
}

func TestNaturalSort(t *testing.T) {
	t.Parallel()
	names := []string{"w-10.j", "w-2.j", "w-1.j", "W-02.j", "a", "w-1.j.x", "10.0.0.10", "10.0.0.9"}
	sortNatural(names)
	want := []string{"10.0.0.9", "10.0.0.10", "a", "w-1.j", "w-1.j.x", "w-2.j", "W-02.j", "w-10.j"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("sorted = %v, want %v", names, want)
	}
}

func TestSiblings(t *testing.T) {
	t.Parallel()
	hosts := []hostfile.Host{
		{Name: "tj-node-0-0.tj"}, {Name: "tj-node-0-1.tj"},
		{Name: "tj-launcher-0-0.tj"}, {Name: "tj-launcher-0-1.tj"}, {Name: "TJ-LAUNCHER-0-2.tj."},
	}
	self := FindSelf("tj-launcher-0-0", hosts)
	if got := Siblings("tj-launcher-0-0", hosts, self); !reflect.DeepEqual(got, []string{"tj-launcher-0-1.tj", "TJ-LAUNCHER-0-2.tj."}) {
		t.Errorf("Siblings = %q", got)
	}
	if got := Siblings("tj-launcher-0-0", hosts[:3], 2); len(got) != 0 {
		t.Errorf("one launcher pod: Siblings = %q", got)
	}
	// A worker's siblings are the other node pods; mpi-operator's launcher
	// name has no indices, so nothing is a sibling.
	if got := Siblings("pi-launcher", []hostfile.Host{{Name: "pi-launcher.pi.default.svc"}, {Name: "pi-worker-0.pi.default.svc"}}, 0); len(got) != 0 {
		t.Errorf("mpi-operator: Siblings = %q", got)
	}
	if got := Siblings("", hosts, -1); len(got) != 0 {
		t.Errorf("no self: Siblings = %q", got)
	}
}
