package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/cgroup/cgrouptest"
)

var (
	memory = Controller{Name: "memory", V2: []string{"memory.events", "memory.current"}, V1: "memory.usage_in_bytes"}
	cpu    = Controller{Name: "cpu", V1: "cpu.cfs_quota_us"}
)

// TestFindOneHierarchyPerController: on a v1 machine each controller is
// found in its own hierarchy (memory/, cpu,cpuacct/) at the path
// /proc/self/cgroup names for it, and Up walks from it to that mount.
func TestFindOneHierarchyPerController(t *testing.T) {
	dir := cgrouptest.Tree(t, map[string]string{
		"proc":                             "12:pids:/x\n4:memory:/kubepods/pod1/ctr\n3:cpu,cpuacct:/kubepods/pod1/ctr\n0::/\n",
		"sys/unified/cgroup.controllers":   "\n",
		"sys/memory/memory.usage_in_bytes": "1\n",
		"sys/memory/kubepods/pod1/ctr/memory.usage_in_bytes": "1\n",
		"sys/cpu,cpuacct/cpu.cfs_quota_us":                   "-1\n",
		"sys/cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_quota_us": "-1\n",
	})
	root, self := filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	m, err := Find(root, self, memory)
	if err != nil || m.Version != 1 || m.Path != filepath.Join(root, "memory", "kubepods", "pod1", "ctr") || m.Mount != filepath.Join(root, "memory") {
		t.Fatalf("memory: %+v, %v", m, err)
	}
	c, err := Find(root, self, cpu)
	if err != nil || c.Version != 1 || c.Path != filepath.Join(root, "cpu,cpuacct", "kubepods", "pod1", "ctr") {
		t.Fatalf("cpu: %+v, %v", c, err)
	}
	up := c.Up()
	want := []string{c.Path, filepath.Dir(c.Path), filepath.Dir(filepath.Dir(c.Path)), c.Mount}
	if !slices.Equal(up, want) {
		t.Errorf("Up() = %v, want %v", up, want)
	}
}

// TestFindV2: a v2 mount is used for memory only where the controller is
// enabled; for cpu as it is; a cgroup namespace (0::/) is the mount.
func TestFindV2(t *testing.T) {
	dir := cgrouptest.Tree(t, map[string]string{
		"proc":                   "0::/kubepods.slice/pod/ctr\n",
		"sys/cgroup.controllers": "cpu memory\n",
		"sys/kubepods.slice/pod/ctr/memory.current": "5\n",
	})
	root, self := filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	for _, c := range []Controller{memory, cpu} {
		d, err := Find(root, self, c)
		if err != nil || d.Version != 2 || d.Path != filepath.Join(root, "kubepods.slice", "pod", "ctr") || d.Mount != root {
			t.Errorf("%s: %+v, %v", c.Name, d, err)
		}
	}
	if err := os.Remove(filepath.Join(root, "kubepods.slice", "pod", "ctr", "memory.current")); err != nil {
		t.Fatal(err)
	}
	var nf *NotFoundError
	if _, err := Find(root, self, memory); !errors.As(err, &nf) || !strings.Contains(err.Error(), "no memory cgroup under "+root) {
		t.Errorf("memory controller not enabled: %v; want NotFoundError", err)
	}
	ns := cgrouptest.Tree(t, map[string]string{"proc": "0::/\n", "sys/cgroup.controllers": "memory\n", "sys/memory.events": "oom_kill 0\n"})
	if d, err := Find(filepath.Join(ns, "sys"), filepath.Join(ns, "proc"), memory); err != nil || d.Path != filepath.Join(ns, "sys") {
		t.Errorf("namespace: %+v, %v; want the mount", d, err)
	}
	if _, err := Find(filepath.Join(ns, "none"), "", memory); !errors.As(err, &nf) {
		t.Errorf("nothing mounted: %v; want NotFoundError", err)
	}
}

func TestReadFiles(t *testing.T) {
	dir := cgrouptest.Tree(t, map[string]string{"a": " 42\n", "keyed": "low 0\nmax 5\n", "bad": "lots\n"})
	if n, ok, err := ReadUint(filepath.Join(dir, "a")); n != 42 || !ok || err != nil {
		t.Errorf("ReadUint = %d %v %v", n, ok, err)
	}
	if n, ok, err := ReadUint(filepath.Join(dir, "missing")); n != 0 || ok || err != nil {
		t.Errorf("ReadUint(missing) = %d %v %v; want not there, no error", n, ok, err)
	}
	if _, _, err := ReadUint(filepath.Join(dir, "bad")); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("ReadUint(bad) = %v; want the file named", err)
	}
	if m, err := ReadKeyed(filepath.Join(dir, "keyed")); err != nil || m["max"] != 5 {
		t.Errorf("ReadKeyed = %v, %v", m, err)
	}
	if _, err := ReadKeyed(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("ReadKeyed(missing) = nil error; the cgroup went away")
	}
}

func TestParseKeyed(t *testing.T) {
	m, err := parseKeyed([]byte("low 0\n\nmax 5\noom_kill 18446744073709551615\n"))
	if err != nil || m["max"] != 5 || m["oom_kill"] != 1<<64-1 {
		t.Fatalf("parseKeyed = %v, %v", m, err)
	}
	for _, bad := range []string{"oom_kill\n", "oom_kill -1\n", "a b c\n", "x 1e3\n"} {
		if _, err := parseKeyed([]byte(bad)); err == nil {
			t.Errorf("parseKeyed(%q) = nil error", bad)
		}
	}
}

func FuzzParseKeyed(f *testing.F) {
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"))
	f.Add([]byte("low 0\nhigh 0\nmax 1\noom 1\noom_kill 1\n"))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseKeyed(data)
		if err == nil && len(m) > 65 {
			t.Fatalf("%d keys", len(m))
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("4:memory:/a/b\n0::/c\n"))
	f.Add([]byte("1:cpu,memory:/\n"))
	f.Add([]byte(":::\n0::\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := parseProcCgroup(data)
		paths := []string{p.v2}
		for _, v := range p.v1 {
			paths = append(paths, v)
		}
		if len(p.v1) > 64 {
			t.Fatalf("%d controllers", len(p.v1))
		}
		// locate never leaves the mount.
		mount := t.TempDir()
		for _, cg := range paths {
			if strings.ContainsRune(cg, '\n') {
				t.Fatalf("path with a newline: %+v", p)
			}
			if d := locate(mount, cg); !strings.HasPrefix(d, mount) {
				t.Fatalf("locate(%q) = %s, outside %s", cg, d, mount)
			}
		}
	})
}
