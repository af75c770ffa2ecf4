package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/harness"
)

// idleSnap is the memory of both servers of one pod before any session.
type idleSnap struct {
	agent, sshd []bench.Mem // samples
}

// idleMem samples worker-agent and the sshd listener five times.
func idleMem(agentPID, sshdPID int) (*idleSnap, error) {
	s := &idleSnap{}
	for range 5 {
		a, err := serverMem(agentPID, nil)
		if err != nil {
			return nil, fmt.Errorf("worker-agent (pid %d): %w", agentPID, err)
		}
		d, err := serverMem(sshdPID, nil)
		if err != nil {
			return nil, fmt.Errorf("sshd (pid %d): %w", sshdPID, err)
		}
		s.agent, s.sshd = append(s.agent, a), append(s.sshd, d)
		time.Sleep(100 * time.Millisecond)
	}
	return s, nil
}

// serverMem is the memory of a server process and of its descendants that
// are server processes too (sshd's per-connection children), leaving out
// the session commands (the shell and what it runs), which are the same
// for both servers. table nil means the process alone.
func serverMem(pid int, table map[int]bench.Proc) (bench.Mem, error) {
	m, err := bench.ReadMem(pid)
	if err != nil {
		return m, err
	}
	if table == nil {
		return m, nil
	}
	for _, d := range bench.Descendants(table, pid) {
		if p := table[d]; strings.HasPrefix(p.Comm, "sshd") || p.Comm == "worker-agent" {
			if dm, err := bench.ReadMem(d); err == nil {
				m = m.Add(dm)
			}
		}
	}
	return m, nil
}

func rssOf(ms []bench.Mem) []float64 {
	var out []float64
	for _, m := range ms {
		out = append(out, float64(m.RSS))
	}
	return out
}

func pssOf(ms []bench.Mem) []float64 {
	var out []float64
	for _, m := range ms {
		out = append(out, float64(m.PSS))
	}
	return out
}

// memSection is figure 4.
func memSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster, idle *idleSnap, agent, sshd *harness.Proc, host string) error {
	const k = 16
	reps := o.rounds(3, 1)
	r.heading("4. Memory: idle server, and per open session",
		fmt.Sprintf("Server processes in worker pod `%s`: worker-agent (one process) and the sshd listener plus its per-connection sshd processes. "+
			"Idle: right after start, before any session. Per session: %d concurrent `ssh host sleep` sessions from the launcher pod to each server "+
			"(the same OpenSSH client for both), (server memory with %d sessions - idle) / %d; the session's own shell and `sleep` are not counted "+
			"(they are the same for both). %d repetitions. RSS counts shared pages in full, PSS divides them among the processes sharing them.", host, k, k, k, reps))
	var perAgentRSS, perAgentPSS, perSSHDRSS, perSSHDPSS []float64
	idleA, idleS := bench.Summarize(rssOf(idle.agent)), bench.Summarize(rssOf(idle.sshd))
	idleAP, idleSP := bench.Summarize(pssOf(idle.agent)), bench.Summarize(pssOf(idle.sshd))
	for rep := range reps {
		a, s, err := sessionsMem(ctx, e, c, agent.PID(), sshd.PID(), host, k, rep)
		if err != nil {
			return err
		}
		perAgentRSS = append(perAgentRSS, (float64(a.RSS)-idleA.Median)/k)
		perAgentPSS = append(perAgentPSS, (float64(a.PSS)-idleAP.Median)/k)
		perSSHDRSS = append(perSSHDRSS, (float64(s.RSS)-idleS.Median)/k)
		perSSHDPSS = append(perSSHDPSS, (float64(s.PSS)-idleSP.Median)/k)
	}
	r.addRaw("mem", "worker-agent idle RSS", rssOf(idle.agent), "B")
	r.addRaw("mem", "worker-agent idle PSS", pssOf(idle.agent), "B")
	r.addRaw("mem", "sshd idle RSS", rssOf(idle.sshd), "B")
	r.addRaw("mem", "sshd idle PSS", pssOf(idle.sshd), "B")
	r.addRaw("mem", "worker-agent per-session RSS", perAgentRSS, "B")
	r.addRaw("mem", "worker-agent per-session PSS", perAgentPSS, "B")
	r.addRaw("mem", "sshd per-session RSS", perSSHDRSS, "B")
	r.addRaw("mem", "sshd per-session PSS", perSSHDPSS, "B")
	line := func(what string, a, s []float64) {
		as, ss := bench.Summarize(a), bench.Summarize(s)
		fmt.Printf("   %-22s worker-agent %10s   sshd %10s   ratio %.2f\n", what, mb(as.Median), mb(ss.Median), bench.Ratio(as.Median, ss.Median))
		fmt.Fprintf(&r.md, "| %s | %s | %s | %.2f |\n", what, mb(as.Median), mb(ss.Median), bench.Ratio(as.Median, ss.Median))
	}
	fmt.Fprintf(&r.md, "| figure (median) | worker-agent | sshd (baseline) | ratio |\n|---|---:|---:|---:|\n")
	line("idle RSS", rssOf(idle.agent), rssOf(idle.sshd))
	line("idle PSS", pssOf(idle.agent), pssOf(idle.sshd))
	line("per-session RSS", perAgentRSS, perSSHDRSS)
	line("per-session PSS", perAgentPSS, perSSHDPSS)
	r.md.WriteString("\n")
	r.check("worker-agent idle RSS", mb(idleA.Median), "< 20 MB", idleA.Median < 20e6)
	r.headline("worker pod's SSH server, idle, RSS: worker-agent against sshd (figure 4)",
		measure{"podmpi", idleA.Median, mb}, measure{"sshd", idleS.Median, mb})
	r.headline("worker pod's SSH server, per open session, RSS (figure 4)",
		measure{"podmpi", bench.Summarize(perAgentRSS).Median, mb}, measure{"sshd", bench.Summarize(perSSHDRSS).Median, mb})
	return nil
}

func mb(b float64) string { return fmt.Sprintf("%.2f MB", b/1e6) }

// sessionsMem opens k sessions to each server, measures both servers and
// closes the sessions again.
func sessionsMem(ctx context.Context, e *env, c *harness.Cluster, agentPID, sshdPID int, host string, k, rep int) (a, s bench.Mem, err error) {
	markA, markS := fmt.Sprintf("sleep 60.%d1", rep), fmt.Sprintf("sleep 60.%d2", rep)
	var clients []*harness.Proc
	defer func() {
		for _, p := range clients {
			_ = p.Stop()
		}
		// sshd leaves a session's command running when its client goes
		// (no pty, no signal): end our sleeps by PID.
		killMarked(c, 1, []string{markA, markS}, 5*time.Second)
	}()
	// Batches of 8 per server: sshd's default MaxStartups (10:30:100)
	// drops unauthenticated connections beyond 10.
	const batch = 8
	for started := 0; started < k; started += batch {
		for range min(batch, k-started) {
			for _, x := range []struct {
				port int
				mark string
			}{{agentPort, markA}, {sshdPort, markS}} {
				p, err := c.Start(ctx, 0, uid, gid, e.baseEnv(), "", "/usr/bin/ssh", append(e.sshArgs(x.port), host, x.mark)...)
				if err != nil {
					return a, s, err
				}
				clients = append(clients, p)
			}
		}
		want := min(started+batch, k)
		deadline := time.Now().Add(30 * time.Second)
		for {
			table, err := bench.Procs()
			if err != nil {
				return a, s, err
			}
			if countCmd(table, markA) >= want && countCmd(table, markS) >= want {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return a, s, fmt.Errorf("after 30 s only %d/%d sessions to worker-agent and %d/%d to sshd run `%s`",
					countCmd(table, markA), want, countCmd(table, markS), want, markA)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		table, err := bench.Procs()
		if err != nil {
			return a, s, err
		}
		na, ns := countCmd(table, markA), countCmd(table, markS)
		if na >= k && ns >= k {
			time.Sleep(300 * time.Millisecond) // let both servers settle
			table, err = bench.Procs()
			if err != nil {
				return a, s, err
			}
			if a, err = serverMem(agentPID, table); err != nil {
				return a, s, err
			}
			s, err = serverMem(sshdPID, table)
			return a, s, err
		}
		if time.Now().After(deadline) {
			return a, s, fmt.Errorf("after 30 s only %d/%d sessions to worker-agent and %d/%d to sshd run `%s`", na, k, ns, k, markA)
		}
		if err := ctx.Err(); err != nil {
			return a, s, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countCmd(table map[int]bench.Proc, cmd string) int {
	n := 0
	for _, p := range table {
		if strings.HasSuffix(p.Cmdline, cmd) && p.Comm == "sleep" {
			n++
		}
	}
	return n
}

// killMarked kills, by PID, the sleep processes in pod whose command line
// ends with one of marks, and waits up to d for them to go.
func killMarked(c *harness.Cluster, pod int, marks []string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		table, err := bench.Procs()
		if err != nil {
			return
		}
		pids := c.PIDs(pod)
		left := 0
		for _, p := range table {
			if p.Comm != "sleep" || !slices.Contains(pids, p.PID) {
				continue
			}
			for _, m := range marks {
				if strings.HasSuffix(p.Cmdline, m) {
					_ = syscall.Kill(p.PID, syscall.SIGKILL)
					left++
				}
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tputSection is figure 5.
func tputSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster, host string) error {
	const gib = 1 << 30
	remote := fmt.Sprintf("head -c %d /dev/zero", gib)
	r.heading("5. Session stdout throughput: the remote command writes 1 GiB",
		fmt.Sprintf("`%s` on worker pod `%s`, the client in the launcher pod writes it to /dev/null; wall time of the whole command.", remote, host))
	sock, stop, err := e.sharingLauncher(ctx, c, []string{host})
	if err != nil {
		return err
	}
	defer stop()
	rsh, rshEnv := e.rsh(host, remote)
	shared, sharedEnv := e.relay(sock, host, remote)
	const to = 3 * time.Minute
	res, err := e.timer(ctx, c, 0, bench.Spec{Rounds: o.rounds(5, 2), Warmup: 1, Cmds: []bench.Cmd{
		{Name: "launcher rsh -> worker-agent", Argv: rsh, Env: rshEnv, Discard: true, Timeout: to},
		{Name: "podmpi-rsh, shared connection -> worker-agent", Argv: shared, Env: sharedEnv, Discard: true, Timeout: to},
		{Name: "ssh -> worker-agent", Argv: e.ssh(agentPort, host, remote), Discard: true, Timeout: to},
		{Name: "ssh -> sshd", Argv: e.ssh(sshdPort, host, remote), Discard: true, Timeout: to},
	}})
	if err != nil {
		return err
	}
	base := res[len(res)-1].Name
	var rows []row
	for _, x := range res[:len(res)-1] {
		rows = append(rows, row{name: x.Name, samples: x.Seconds, baseline: base})
	}
	sum := r.timeTable("tput", append(rows, row{name: base, samples: res[len(res)-1].Seconds}))
	rate := func(n string) float64 { return gib / sum[n].Median / 1e6 }
	for _, x := range res {
		r.note("%s: %.0f MB/s (median), %.0f MB/s (p95 time)", x.Name, rate(x.Name), gib/sum[x.Name].P95/1e6)
	}
	b := rate(base)
	for _, x := range res[:2] {
		p := rate(x.Name)
		r.check("session throughput, "+x.Name+" vs ssh -> sshd", fmt.Sprintf("%.0f vs %.0f MB/s (%.2fx)", p, b, p/b), ">= 1.2x", p >= 1.2*b)
	}
	return nil
}
