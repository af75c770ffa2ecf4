package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// startAgentsTogether starts worker-agent (--slots 2) in every listed pod
// at once and waits until all are ready.
func (f *fixture) startAgentsTogether(t *testing.T, ctx context.Context, pods []int) {
	t.Helper()
	started := map[int]*harness.Proc{}
	for _, pod := range pods {
		home := filepath.Join(work, "home-"+f.c.Pod(pod).Hostname)
		if err := MakeDir(home); err != nil {
			t.Fatal(err)
		}
		p, err := StartAgent(context.Background(), f.c, pod, bin, AgentOptions{AuthDir: authDir, Home: home, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		f.agents[pod] = p
		started[pod] = p
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := WaitReady(rctx, f.c, started); err != nil {
		t.Fatal(err)
	}
}

// TestLateAgentsSlots is issue 9's acceptance test: 16 workers whose
// worker-agents start 5 s after their names resolve, with --slots auto, a
// discovery source that gives no counts (--discovery.template) and 2 slots
// per agent, run with exactly 32 ranks. The launcher used to give up on an
// agent's /info after ~2 s of connection refused and run a smaller world
// (-np 29 instead of 32) with exit 0. When two agents never start, the
// launcher fails with exit 72 naming exactly those two.
func TestLateAgentsSlots(t *testing.T) {
	const n = 16
	ctx := testCtx(t, 8*time.Minute)
	var all []int
	for pod := 1; pod <= n; pod++ {
		all = append(all, pod)
	}
	f := newFixture(t, "ls", n, all...)
	flags := []string{"--discovery.template", "ls-node-0-{i}.ls", "--workers-expected", fmt.Sprint(n),
		"--slots", "auto", "--discovery.timeout", "60s", "--probe.timeout", "90s", "--mpirun.timeout", "120s"}

	t.Run("all agents late", func(t *testing.T) {
		start := time.Now()
		p := f.launch(t, ctx, flags, "mpirun.openmpi", allreduceOMPI)
		for _, pod := range all {
			if err := f.c.Publish(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
		// The agents start 5 s after their names: the scenario, not a
		// timing assertion.
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			t.Fatalf("launcher exited %d before any worker-agent started; output:\n%s", p.ExitCode(), b)
		case <-time.After(5 * time.Second):
		}
		f.startAgentsTogether(t, ctx, all)
		r := wait(t, p, start, 4*time.Minute)
		mustSucceed(t, r)
		want := map[string]int{}
		for i := range n {
			want[fmt.Sprintf("ls-node-0-%d", i)] = 2
		}
		checkAllreduce(t, r, 2*n, want)
		if !regexp.MustCompile(`running: mpirun\.openmpi -np 32 `).MatchString(r.out) {
			t.Errorf("the command did not run with -np 32; output:\n%s", r.out)
		}
		if !strings.Contains(r.out, "(OpenMPI, 16 hosts, 32 slots)") {
			t.Errorf("hostfile report does not show 16 hosts with 32 slots; output:\n%s", r.out)
		}
		// The first progress line comes as soon as an agent is awaited (its
		// first /info refused), not after a progress interval.
		if !strings.Contains(r.out, "worker-agents answered; waiting for") {
			t.Errorf("no progress line while the agents were awaited; output:\n%s", r.out)
		}
	})

	t.Run("two agents never start", func(t *testing.T) {
		for _, pod := range all {
			f.stopAgent(t, pod)
		}
		missing := []int{4, 11} // pods: workers ls-node-0-3 and ls-node-0-10
		var late []int
		for _, pod := range all {
			if !slices.Contains(missing, pod) {
				late = append(late, pod)
			}
		}
		short := append(slices.Clone(flags[:len(flags)-4]), "--probe.timeout", "20s")
		start := time.Now()
		p := f.launch(t, ctx, short, "mpirun.openmpi", allreduceOMPI)
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			t.Fatalf("launcher exited %d before any worker-agent started; output:\n%s", p.ExitCode(), b)
		case <-time.After(5 * time.Second):
		}
		f.startAgentsTogether(t, ctx, late)
		r := wait(t, p, start, 2*time.Minute)
		if r.code != 72 {
			t.Fatalf("launcher exit %d, want 72 (slots-unknown); output:\n%s", r.code, r.out)
		}
		if !strings.Contains(r.out, "slot count unknown for 2 of 16 workers") {
			t.Errorf("output does not say 2 of 16 workers are unknown:\n%s", r.out)
		}
		named := regexp.MustCompile(`(?m)^(ls-node-0-\d+\.ls): GET http://\S+:9022/info: `).FindAllStringSubmatch(r.out, -1)
		var got []string
		for _, m := range named {
			if !slices.Contains(got, m[1]) {
				got = append(got, m[1])
			}
		}
		if !slices.Equal(got, []string{"ls-node-0-3.ls", "ls-node-0-10.ls"}) {
			t.Errorf("workers named as unknown: %v, want exactly ls-node-0-3.ls and ls-node-0-10.ls; output:\n%s", got, r.out)
		}
		if strings.Contains(r.out, "running: mpirun") {
			t.Errorf("mpirun ran although slots were unknown:\n%s", r.out)
		}
		term, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("run-%s-%d", f.job, f.seq), "termination-log"))
		if err != nil || !strings.Contains(string(term), "exit code 72") || !strings.Contains(string(term), "ls-node-0-10.ls") {
			t.Errorf("termination log (%v):\n%s", err, term)
		}
	})
}
