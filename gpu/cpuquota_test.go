package gpu

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/cgroup/cgrouptest"
)

func TestCgroupCPUQuota(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		files      map[string]string // under the fake root; "proc/self/cgroup" is the process's cgroup file
		numCPU     int
		want       float64
		wantSlots  int
		wantSource string
		wantErr    string
	}{
		{name: "v2 1.5 CPUs", files: map[string]string{"sys/cgroup.controllers": "cpu memory", "sys/cpu.max": "150000 100000\n"},
			numCPU: 8, want: 1.5, wantSlots: 1, wantSource: "sys"},
		{name: "v2 max", files: map[string]string{"sys/cgroup.controllers": "cpu", "sys/cpu.max": "max 100000\n"},
			numCPU: 8, want: 8, wantSlots: 8, wantSource: "NumCPU"},
		{name: "v2 quota above NumCPU is capped", files: map[string]string{"sys/cgroup.controllers": "cpu", "sys/cpu.max": "1600000 100000"},
			numCPU: 4, want: 4, wantSlots: 4, wantSource: "NumCPU"},
		{name: "v2 small quota", files: map[string]string{"sys/cgroup.controllers": "cpu", "sys/cpu.max": "20000 100000"},
			numCPU: 4, want: 0.2, wantSlots: 1},
		{name: "v2 nested: tightest level wins", files: map[string]string{
			"proc/self/cgroup":              "0::/kubepods/pod1/ctr\n",
			"sys/cgroup.controllers":        "cpu",
			"sys/kubepods/cpu.max":          "max 100000",
			"sys/kubepods/pod1/cpu.max":     "300000 100000",
			"sys/kubepods/pod1/ctr/cpu.max": "max 100000",
		}, numCPU: 16, want: 3, wantSlots: 3, wantSource: "pod1"},
		{name: "v2 cgroup path absent (cgroup namespace mount)", files: map[string]string{
			"proc/self/cgroup": "0::/elsewhere\n", "sys/cgroup.controllers": "cpu", "sys/cpu.max": "250000 100000",
		}, numCPU: 16, want: 2.5, wantSlots: 2},
		{name: "v2 escaping path stays under root", files: map[string]string{
			"proc/self/cgroup": "0::/../../..\n", "sys/cgroup.controllers": "cpu", "sys/cpu.max": "200000 100000",
		}, numCPU: 16, want: 2, wantSlots: 2},
		{name: "v2 no cpu.max", files: map[string]string{"sys/cgroup.controllers": "memory"}, numCPU: 3, want: 3, wantSlots: 3},
		{name: "v2 malformed", files: map[string]string{"sys/cgroup.controllers": "cpu", "sys/cpu.max": "lots 100000"},
			numCPU: 3, wantErr: "cpu.max"},
		{name: "v2 zero period", files: map[string]string{"sys/cgroup.controllers": "cpu", "sys/cpu.max": "100000 0"},
			numCPU: 3, wantErr: "cpu.max"},
		{name: "v1 1.5 CPUs", files: map[string]string{
			"sys/cpu/cpu.cfs_quota_us": "150000\n", "sys/cpu/cpu.cfs_period_us": "100000\n"},
			numCPU: 8, want: 1.5, wantSlots: 1, wantSource: "cpu"},
		{name: "v1 unlimited", files: map[string]string{
			"sys/cpu/cpu.cfs_quota_us": "-1\n", "sys/cpu/cpu.cfs_period_us": "100000\n"},
			numCPU: 2, want: 2, wantSlots: 2},
		{name: "v1 cpu,cpuacct nested", files: map[string]string{
			"proc/self/cgroup":                             "11:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n",
			"sys/cpu,cpuacct/cpu.cfs_quota_us":             "-1",
			"sys/cpu,cpuacct/cpu.cfs_period_us":            "100000",
			"sys/cpu,cpuacct/docker/abc/cpu.cfs_quota_us":  "450000",
			"sys/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
		}, numCPU: 32, want: 4.5, wantSlots: 4, wantSource: "abc"},
		{name: "v1 malformed", files: map[string]string{"sys/cpu/cpu.cfs_quota_us": "x"}, numCPU: 2, wantErr: "cfs_quota_us"},
		{name: "nothing mounted", files: map[string]string{"sys/.keep": ""}, numCPU: 6, want: 6, wantSlots: 6, wantSource: "NumCPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := cgrouptest.Tree(t, tc.files)
			q := &CgroupCPUQuota{
				Root:           filepath.Join(root, "sys"),
				ProcSelfCgroup: filepath.Join(root, "proc/self/cgroup"),
				NumCPU:         func() int { return tc.numCPU },
			}
			got, err := q.CPUs()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("CPUs() = %v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("CPUs() = %v, %v; want %v", got, err, tc.want)
			}
			lim, _ := q.Limit()
			if !strings.Contains(lim.Source, tc.wantSource) {
				t.Errorf("Source %q lacks %q", lim.Source, tc.wantSource)
			}
			slots, err := SlotPolicy{Mode: SlotsCPU}.Resolve(Inventory{}, q)
			if err != nil || slots.N != tc.wantSlots || slots.Source != SlotSourceCPU {
				t.Fatalf("Resolve(cpu) = %+v, %v; want %d cpu slots", slots, err, tc.wantSlots)
			}
		})
	}
}

// TestCgroupCPUQuotaThisMachine reads the real cgroup tree: whatever it
// holds, the answer is between a tiny quota and NumCPU.
func TestCgroupCPUQuotaThisMachine(t *testing.T) {
	t.Parallel()
	q := NewCgroupCPUQuota()
	lim, err := q.Limit()
	if err != nil {
		t.Fatalf("Limit: %v", err)
	}
	if lim.CPUs <= 0 || lim.CPUs > float64(q.NumCPU()) || lim.Source == "" {
		t.Fatalf("Limit = %+v; want 0 < CPUs <= %d with a source", lim, q.NumCPU())
	}
	t.Logf("this machine: %+v", lim)
}
