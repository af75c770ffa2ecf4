package account

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/podmpi/podmpi/cgroup"
)

// DefaultCgroupRoot is where the cgroup file systems are mounted.
const DefaultCgroupRoot = cgroup.DefaultRoot

// unlimitedV1 is the smallest cgroup v1 memory.limit_in_bytes value that
// means "no limit" (the kernel prints PAGE_COUNTER_MAX pages, about 2^63,
// rounded down to the page size).
const unlimitedV1 = 1 << 62

// memoryController is how package cgroup finds the memory cgroup.
var memoryController = cgroup.Controller{Name: "memory", V2: []string{"memory.events", "memory.current"}, V1: "memory.usage_in_bytes"}

// MemoryCgroup is this process's memory cgroup: cgroup v2 (memory.events,
// memory.current, memory.max, memory.peak) or cgroup v1 (memory.oom_control,
// memory.usage_in_bytes, memory.max_usage_in_bytes, memory.limit_in_bytes,
// memory.failcnt).
type MemoryCgroup struct {
	cgroup.Dir
}

// MemorySample is one reading of the memory cgroup.
type MemorySample struct {
	Limit    uint64 // tightest limit from the cgroup up to the mount; 0: none
	Usage    uint64
	Peak     uint64 // v1 max_usage_in_bytes, v2 memory.peak; 0 when absent
	OOMKills uint64 // oom_kill
	// LimitEvents counts the evidence that the cgroup itself ran out of
	// memory at its limit: v2 memory.events "oom" (the cgroup's OOM
	// killer invoked because usage reached memory.max and reclaim failed;
	// a node-wide OOM kill does not raise it, and "max", reclaim at the
	// limit that may well succeed, is not counted), v1 memory.failcnt
	// (charges refused at the limit; v1 counts no OOMs, and every OOM at
	// the limit follows refused charges). Only its rise between two
	// samples means anything.
	LimitEvents uint64
}

// FindMemoryCgroup locates this process's memory cgroup under root (the
// cgroup mount point, normally /sys/fs/cgroup) from procSelfCgroup
// (/proc/self/cgroup), as package cgroup finds every controller's: v2 when
// the memory controller is enabled there, else the v1 memory hierarchy.
func FindMemoryCgroup(root, procSelfCgroup string) (*MemoryCgroup, error) {
	d, err := cgroup.Find(root, procSelfCgroup, memoryController)
	var nf *cgroup.NotFoundError
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("%w (--account.cgroup-root points elsewhere)", err)
	}
	if err != nil {
		return nil, err
	}
	return &MemoryCgroup{Dir: d}, nil
}

// Read samples the cgroup.
func (c *MemoryCgroup) Read() (MemorySample, error) {
	if c.Version == 2 {
		return c.readV2()
	}
	return c.readV1()
}

func (c *MemoryCgroup) readV2() (MemorySample, error) {
	var s MemorySample
	events, err := cgroup.ReadKeyed(filepath.Join(c.Path, "memory.events"))
	if err != nil {
		return s, err
	}
	s.OOMKills = events["oom_kill"]
	s.LimitEvents = events["oom"]
	if s.Usage, _, err = cgroup.ReadUint(filepath.Join(c.Path, "memory.current")); err != nil {
		return s, err
	}
	if s.Peak, _, err = cgroup.ReadUint(filepath.Join(c.Path, "memory.peak")); err != nil {
		return s, err
	}
	s.Limit, err = c.tightest("memory.max", func(v string) (uint64, bool, error) {
		if v == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil, err
	})
	return s, err
}

func (c *MemoryCgroup) readV1() (MemorySample, error) {
	var s MemorySample
	oom, err := cgroup.ReadKeyed(filepath.Join(c.Path, "memory.oom_control"))
	if err != nil {
		return s, err
	}
	s.OOMKills = oom["oom_kill"]
	if s.Usage, _, err = cgroup.ReadUint(filepath.Join(c.Path, "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	if s.Peak, _, err = cgroup.ReadUint(filepath.Join(c.Path, "memory.max_usage_in_bytes")); err != nil {
		return s, err
	}
	if s.LimitEvents, _, err = cgroup.ReadUint(filepath.Join(c.Path, "memory.failcnt")); err != nil {
		return s, err
	}
	s.Limit, err = c.tightest("memory.limit_in_bytes", func(v string) (uint64, bool, error) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, err
		}
		return n, n < unlimitedV1, nil
	})
	return s, err
}

// tightest reads file in the cgroup and each parent up to the mount and
// returns the tightest limit; 0 when no level has one.
func (c *MemoryCgroup) tightest(file string, parse func(string) (uint64, bool, error)) (uint64, error) {
	var best uint64
	for _, dir := range c.Up() {
		p := filepath.Join(dir, file)
		v, err := cgroup.ReadSmall(p)
		if err != nil {
			return 0, err
		}
		if v == "" {
			continue
		}
		n, limited, err := parse(v)
		if err != nil {
			return 0, cgroup.Malformed(p, v, "a byte count")
		}
		if limited && (best == 0 || n < best) {
			best = n
		}
	}
	return best, nil
}
