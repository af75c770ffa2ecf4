package account

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/cgroup/cgrouptest"
)

// v2Files is a cgroup v2 leaf with the given memory files under cg.
func v2Files(cg, max, current, peak, events string) map[string]string {
	m := map[string]string{
		"sys/cgroup.controllers":            "cpuset cpu io memory pids\n",
		"sys" + cg + "/cgroup.controllers":  "cpu memory pids\n",
		"sys" + cg + "/memory.events":       events,
		"sys" + cg + "/memory.current":      current,
		"sys" + cg + "/memory.max":          max,
		"proc/cgroup":                       "0::" + cg + "\n",
		"sys/kubepods.slice/memory.max":     "max\n",
		"sys/kubepods.slice/memory.current": "999999999\n",
	}
	if peak != "" {
		m["sys"+cg+"/memory.peak"] = peak
	}
	return m
}

// v1Files is a hybrid machine (v2 at unified without memory) with the
// memory hierarchy at memory/ and the process in cg.
func v1Files(cg, limit, usage, maxUsage, failcnt, oomKill string) map[string]string {
	return map[string]string{
		"sys/unified/cgroup.controllers":                 "\n",
		"sys/memory/memory.usage_in_bytes":               "5000000000\n",
		"sys/memory/memory.limit_in_bytes":               "9223372036854771712\n",
		"sys/memory" + cg + "/memory.usage_in_bytes":     usage,
		"sys/memory" + cg + "/memory.max_usage_in_bytes": maxUsage,
		"sys/memory" + cg + "/memory.limit_in_bytes":     limit,
		"sys/memory" + cg + "/memory.failcnt":            failcnt,
		"sys/memory" + cg + "/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill " + oomKill + "\n",
		"proc/cgroup": "12:pids:/x\n4:memory:" + cg + "\n3:cpu,cpuacct:/y\n0::/\n",
		"sys/memory" + filepath.Dir(cg) + "/memory.limit_in_bytes": "9223372036854771712\n",
	}
}

func find(t *testing.T, dir string) *MemoryCgroup {
	t.Helper()
	cg, err := FindMemoryCgroup(filepath.Join(dir, "sys"), filepath.Join(dir, "proc", "cgroup"))
	if err != nil {
		t.Fatalf("FindMemoryCgroup: %v", err)
	}
	return cg
}

func TestMemoryCgroupV2(t *testing.T) {
	const cg = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"
	dir := cgrouptest.Tree(t, v2Files(cg, "209715200\n", "104857600\n", "209715200\n",
		"low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"))
	c := find(t, dir)
	if c.Version != 2 || c.Path != filepath.Join(dir, "sys", cg) {
		t.Fatalf("found %s v%d, want %s v2", c.Path, c.Version, cg)
	}
	s, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := MemorySample{Limit: 200 << 20, Usage: 100 << 20, Peak: 200 << 20, OOMKills: 1, LimitEvents: 1}
	if s != want {
		t.Errorf("sample = %+v, want %+v", s, want)
	}
}

func TestMemoryCgroupV2ParentLimitAndNoPeak(t *testing.T) {
	const cg = "/kubepods.slice/pod/ctr"
	files := v2Files(cg, "max\n", "1024\n", "", "oom_kill 0\n")
	files["sys/kubepods.slice/pod/memory.max"] = "1073741824\n"
	dir := cgrouptest.Tree(t, files)
	s, err := find(t, dir).Read()
	if err != nil {
		t.Fatal(err)
	}
	if s.Limit != 1<<30 || s.Peak != 0 || s.Usage != 1024 {
		t.Errorf("sample = %+v; want the pod's limit 1 GiB, no peak (no memory.peak), usage 1024", s)
	}
}

func TestMemoryCgroupV2Namespace(t *testing.T) {
	// Under a cgroup namespace the process sees "0::/" and its own cgroup
	// mounted at the root.
	dir := cgrouptest.Tree(t, map[string]string{
		"sys/cgroup.controllers": "memory\n",
		"sys/memory.events":      "oom_kill 3\n",
		"sys/memory.current":     "10\n",
		"sys/memory.max":         "100\n",
		"proc/cgroup":            "0::/\n",
	})
	c := find(t, dir)
	if c.Path != filepath.Join(dir, "sys") {
		t.Fatalf("dir = %s, want the mount", c.Path)
	}
	s, err := c.Read()
	if err != nil || s.OOMKills != 3 || s.Limit != 100 {
		t.Fatalf("sample = %+v, %v; want 3 OOM kills, limit 100", s, err)
	}
}

func TestMemoryCgroupV1Hybrid(t *testing.T) {
	const cg = "/process_api/abc/podmpi-e2e"
	dir := cgrouptest.Tree(t, v1Files(cg, "209715200\n", "104857600\n", "209715200\n", "7\n", "2"))
	c := find(t, dir)
	if c.Version != 1 || c.Path != filepath.Join(dir, "sys", "memory", cg) {
		t.Fatalf("found %s v%d, want %s v1", c.Path, c.Version, cg)
	}
	s, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := MemorySample{Limit: 200 << 20, Usage: 100 << 20, Peak: 200 << 20, OOMKills: 2, LimitEvents: 7}
	if s != want {
		t.Errorf("sample = %+v, want %+v", s, want)
	}
}

func TestMemoryCgroupV1Unlimited(t *testing.T) {
	dir := cgrouptest.Tree(t, v1Files("/a/b", "9223372036854771712\n", "1\n", "2\n", "0\n", "0"))
	s, err := find(t, dir).Read()
	if err != nil || s.Limit != 0 {
		t.Fatalf("sample = %+v, %v; want no limit", s, err)
	}
}

func TestMemoryCgroupV1ContainerMount(t *testing.T) {
	// Docker/containerd on cgroup v1 bind-mount the container's own cgroup
	// at /sys/fs/cgroup/memory, while /proc/self/cgroup names the host path.
	dir := cgrouptest.Tree(t, map[string]string{
		"sys/memory/memory.usage_in_bytes":     "1000\n",
		"sys/memory/memory.max_usage_in_bytes": "2000\n",
		"sys/memory/memory.limit_in_bytes":     "4096\n",
		"sys/memory/memory.failcnt":            "0\n",
		"sys/memory/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
		"proc/cgroup":                          "4:memory:/kubepods/burstable/pod1/ctr\n",
	})
	c := find(t, dir)
	if c.Path != filepath.Join(dir, "sys", "memory") {
		t.Fatalf("dir = %s, want the mount itself", c.Path)
	}
	if s, err := c.Read(); err != nil || s.Limit != 4096 || s.OOMKills != 1 {
		t.Fatalf("sample = %+v, %v", s, err)
	}
}

func TestMemoryCgroupV1Suffix(t *testing.T) {
	// Only part of the host path exists below the mount: its longest
	// existing suffix is the cgroup.
	files := v1Files("/ctr", "100\n", "1\n", "1\n", "0\n", "0")
	files["proc/cgroup"] = "4:memory:/kubepods/pod1/ctr\n"
	dir := cgrouptest.Tree(t, files)
	if c := find(t, dir); c.Path != filepath.Join(dir, "sys", "memory", "ctr") {
		t.Fatalf("dir = %s, want .../memory/ctr", c.Path)
	}
}

func TestMemoryCgroupMissing(t *testing.T) {
	// What a pod started with `ip netns exec` sees: a fresh sysfs without
	// the cgroup mounts.
	dir := cgrouptest.Tree(t, map[string]string{"proc/cgroup": "4:memory:/x\n", "sys/.keep": ""})
	_, err := FindMemoryCgroup(filepath.Join(dir, "sys"), filepath.Join(dir, "proc", "cgroup"))
	if err == nil || !strings.Contains(err.Error(), "no memory cgroup under") || !strings.Contains(err.Error(), "--account.cgroup-root") {
		t.Fatalf("err = %v; want no memory cgroup, naming the flag", err)
	}
}

func TestMemoryCgroupMalformed(t *testing.T) {
	files := v1Files("/a", "lots\n", "1\n", "1\n", "0\n", "0")
	dir := cgrouptest.Tree(t, files)
	_, err := find(t, dir).Read()
	if err == nil || !strings.Contains(err.Error(), "memory.limit_in_bytes") {
		t.Fatalf("err = %v; want the malformed file named", err)
	}
	files = v1Files("/a", "1\n", "1\n", "1\n", "0\n", "0")
	files["sys/memory/a/memory.oom_control"] = "oom_kill\n"
	dir = cgrouptest.Tree(t, files)
	if _, err := find(t, dir).Read(); err == nil || !strings.Contains(err.Error(), "memory.oom_control") {
		t.Fatalf("err = %v; want the malformed oom_control named", err)
	}
}

func TestMemoryCgroupGone(t *testing.T) {
	dir := cgrouptest.Tree(t, v1Files("/a", "1\n", "1\n", "1\n", "0\n", "0"))
	c := find(t, dir)
	if err := os.RemoveAll(c.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(); err == nil || !strings.Contains(err.Error(), "memory.oom_control") {
		t.Fatalf("err = %v; want the missing file named", err)
	}
}

// TestMemoryCgroupThisMachine reads the real cgroup of the test process.
func TestMemoryCgroupThisMachine(t *testing.T) {
	c, err := FindMemoryCgroup(DefaultCgroupRoot, "/proc/self/cgroup")
	if err != nil {
		t.Skipf("no memory cgroup here: %v", err)
	}
	s, err := c.Read()
	if err != nil {
		t.Fatalf("reading %s (v%d): %v", c.Path, c.Version, err)
	}
	if s.Usage == 0 {
		t.Errorf("%s (v%d): usage 0 while this test runs in it", c.Path, c.Version)
	}
	t.Logf("%s (cgroup v%d): %+v", c.Path, c.Version, s)
}
