package main

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/harness"
)

// scalePoint is one point of the init-vs-N plot.
type scalePoint struct {
	series      string
	n           int
	median, p95 float64
	extrapolate bool
}

// simAddr is the address of simulated worker i: 10.200.0.0/16, 200 per /24.
func simAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 200, byte(i / 200), byte(10 + i%200)})
}

func simName(i int) string { return fmt.Sprintf("sw-%d.sj", i) }

// scaleSection is figure 3 at scale: a launcher pod and one "sim" pod
// holding one address per simulated worker (10.200.x.y/32 on its eth0; the
// launcher pod routes 10.200.0.0/16 to it) with ONE worker-agent listening
// on :2222 (and :9022) of all of them, one sshd on :2223 for the baseline,
// and a dnsmasq in the sim pod answering sw-<i>.sj.default.svc.cluster.local
// for every i, which the launcher pod's resolv.conf points to.
func scaleSection(ctx context.Context, o options, e *env, r *report) ([]scalePoint, error) {
	maxN := 0
	for _, n := range append(append(append([]int{}, o.scaleNs...), o.shellNs...), o.footNs...) {
		maxN = max(maxN, n)
	}
	etc := e.etcFiles()
	c, err := harness.Start(ctx, harness.Config{Job: "sj", LogDir: filepath.Join(e.work, "log-scale"), Pods: []harness.PodSpec{
		{Hostname: "sj-launcher-0-0", Role: harness.RoleLauncher, Publish: true, EtcFiles: etc},
		{Hostname: "sj-sim-0", Role: harness.RoleWorker, Publish: true, EtcFiles: etc},
	}})
	if err != nil {
		return nil, err
	}
	defer closeCluster(c)
	if err := simNetwork(ctx, e, c, maxN); err != nil {
		return nil, err
	}
	// One worker-agent stands for every simulated worker, so the launcher
	// pod's parallel probe and mpirun's daemons arrive as up to 64
	// connections at once from one address, where a real worker sees one:
	// the per-source and total limits on unauthenticated connections are
	// raised to match (sshd's MaxStartups likewise, in env.go). And every
	// simulated worker's orted runs in this one pod, where their session
	// directories (TMPDIR/ompi.<host>.<uid>/...) would collide: the
	// sessions' PATH starts with an orted wrapper that gives each its own
	// TMPDIR, for both servers.
	simBin, err := e.simOrted()
	if err != nil {
		return nil, err
	}
	agent, _, err := e.startServers(ctx, c, 1, 0, 1, simAddr(0).String(), serverOpts{
		agentArgs: []string{"--ssh.max-startups", "1024", "--ssh.per-source-max-startups", "1024"},
		path:      simBin + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
	})
	if err != nil {
		return nil, err
	}
	fmt.Printf("   cluster %s: %d simulated workers ready\n", c.ID(), maxN)

	var points []scalePoint
	if o.want("scale") {
		if points, err = scalePoints(ctx, o, e, r, c, agent, maxN); err != nil {
			return points, err
		}
	}
	if o.want("status") {
		ns := []int{16}
		if maxN > 16 {
			ns = append(ns, maxN)
		}
		if err := statusSection(ctx, o, e, r, c, ns); err != nil {
			return points, fmt.Errorf("launcher init with Trainer's status API: %w", err)
		}
	}
	if o.want("footprint") {
		if err := footprintSection(ctx, o, e, r, c); err != nil {
			return points, fmt.Errorf("launcher pod footprint: %w", err)
		}
	}
	return points, nil
}

// scalePoints takes figure 3b's points on the simulation cluster c.
func scalePoints(ctx context.Context, o options, e *env, r *report, c *harness.Cluster, agent *harness.Proc, maxN int) ([]scalePoint, error) {
	r.heading("3b. Launcher init at scale (simulated workers)",
		fmt.Sprintf("One launcher pod and one pod holding %d addresses (10.200.x.y/32), each a worker name `sw-<i>.sj` that a dnsmasq in that pod "+
			"answers (the launcher pod's resolv.conf points to it; search list and ndots:5 as in Kubernetes). ONE worker-agent (`--slots 1`) listens on "+
			":2222 and :9022 of every address, so every worker costs the launcher a real DNS lookup, an HTTP /info request and an SSH handshake "+
			"plus probe command, all served by one process on the same 2 CPUs. "+
			"Command: `launcher --discovery.template sw-{i}.sj --workers-expected N --mpi.implementation openmpi4 -- /bin/true`. "+
			"Baselines: mpi-operator's entrypoint (nslookup of its own name and of each host of an MPICH-format hostfile, then exec; run interleaved with the launcher at every N) "+
			"and the shell entrypoint (nslookup per host, then `ssh host true` per host) against one sshd on :2223 of the same addresses.", maxN))
	var points []scalePoint
	type lres struct {
		n     int
		init  bench.Summary
		wall  bench.Summary
		cpu   bench.Summary // launcher CPU seconds per run
		agent float64       // worker-agent CPU seconds per run (mean)
		op    bench.Summary // mpi-operator's entrypoint, wall
		lines [][]string
	}
	self := c.Pod(0).ShortName
	var lr []lres
	for _, n := range o.scaleNs {
		rounds := 10
		switch {
		case n >= 1024:
			rounds = 6
		case n >= 256:
			rounds = 8
		}
		var hosts []string
		for i := range n {
			hosts = append(hosts, simName(i))
		}
		_, _, opScript, opHostfile, err := e.writeEntrypoints(hosts, "sim-"+strconv.Itoa(n))
		if err != nil {
			return points, err
		}
		// The worker-agent's CPU per run: the entrypoint's lookups, run
		// between the launcher's, cost it nothing.
		cpu0, _ := bench.ProcCPU(agent.PID())
		spec := bench.Spec{Rounds: o.rounds(rounds, 2), Warmup: 1, Cmds: []bench.Cmd{{
			Name: fmt.Sprintf("launcher N=%d", n),
			Argv: e.launcherArgs([]string{"--discovery.template", "sw-{i}.sj", "--workers-expected", strconv.Itoa(n),
				"--mpi.implementation", "openmpi4", "--discovery.timeout", "1m", "--probe.timeout", "1m"}, "/bin/true"),
			Grep: bench.LauncherGrep, Timeout: 3 * time.Minute,
		}, {
			Name: fmt.Sprintf("%s N=%d", opEntrypointName, n),
			Argv: []string{"/bin/bash", opScript, self, opHostfile, "/bin/true"},
			// One nslookup a host: about 10 ms on a quiet machine, 150 ms
			// at a load average of 30.
			Timeout: time.Duration(n)*400*time.Millisecond + 2*time.Minute,
		}}}
		res, err := e.timer(ctx, c, 0, spec)
		if err != nil {
			return points, err
		}
		cpu1, _ := bench.ProcCPU(agent.PID())
		init, _ := phaseSeries(res[0].Lines, "", "")
		x := lres{n: n, init: bench.Summarize(init), wall: bench.Summarize(res[0].Seconds), cpu: bench.Summarize(res[0].CPU),
			agent: (cpu1 - cpu0) / float64(spec.Rounds+spec.Warmup), op: bench.Summarize(res[1].Seconds), lines: res[0].Lines}
		r.addRaw("scale", fmt.Sprintf("launcher cpu N=%d", n), res[0].CPU, "s")
		lr = append(lr, x)
		r.addRaw("scale", fmt.Sprintf("launcher init N=%d", n), init, "s")
		r.addRaw("scale", fmt.Sprintf("launcher wall N=%d", n), res[0].Seconds, "s")
		r.addRaw("scale", res[1].Name, res[1].Seconds, "s")
		points = append(points, scalePoint{series: "launcher init", n: n, median: x.init.Median, p95: x.init.P95},
			scalePoint{series: "mpi-operator entrypoint", n: n, median: x.op.Median, p95: x.op.P95})
		fmt.Printf("   launcher N=%-5d init median %s p95 %s (wall %s; CPU per run: launcher %s, the one worker-agent %s); mpi-operator entrypoint %s\n", n,
			bench.Ms(x.init.Median), bench.Ms(x.init.P95), bench.Ms(x.wall.Median), bench.Ms(x.cpu.Median), bench.Ms(x.agent), bench.Ms(x.op.Median))
	}
	shell := map[int]bench.Summary{}
	var lastN int
	for _, n := range o.shellNs {
		rounds := 1
		switch {
		case n <= 16:
			rounds = 3
		case n <= 64:
			rounds = 2
		}
		var hosts []string
		for i := range n {
			hosts = append(hosts, simName(i))
		}
		script, list, _, _, err := e.writeEntrypoints(hosts, "sim-"+strconv.Itoa(n))
		if err != nil {
			return points, err
		}
		res, err := e.timer(ctx, c, 0, bench.Spec{Rounds: o.rounds(rounds, 1), Cmds: []bench.Cmd{{
			Name: fmt.Sprintf("shell entrypoint N=%d", n), Argv: []string{"/bin/sh", script, list, strconv.Itoa(sshdPort), e.key, user},
			Timeout: time.Duration(n)*2*time.Second + time.Minute,
		}}})
		if err != nil {
			return points, err
		}
		s := bench.Summarize(res[0].Seconds)
		shell[n], lastN = s, n
		r.addRaw("scale", fmt.Sprintf("shell entrypoint N=%d", n), res[0].Seconds, "s")
		points = append(points, scalePoint{series: "shell entrypoint", n: n, median: s.Median, p95: s.P95})
		fmt.Printf("   shell entrypoint N=%-5d median %s (n=%d)\n", n, bench.Ms(s.Median), s.N)
	}
	// The table: launcher init and wall per N, against the shell entrypoint
	// (measured, or extrapolated linearly from the largest measured N: it
	// handles one host after the other).
	fmt.Fprintf(&r.md, "| N workers | launcher init median | p95 | launcher wall median | launcher CPU / run | worker-agent CPU / run (all N workers) | mpi-operator entrypoint median | launcher wall / mpi-operator entrypoint | shell entrypoint median | shell / launcher init |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("   %-9s %12s %12s %12s %14s %8s %22s %10s\n", "N", "init median", "init p95", "wall median", "mpi-operator", "ratio", "shell entrypoint", "ratio")
	for _, x := range lr {
		sh, label := math.NaN(), "not measured"
		if s, ok := shell[x.n]; ok {
			sh, label = s.Median, bench.Ms(s.Median)
		} else if lastN > 0 {
			sh = shell[lastN].Median / float64(lastN) * float64(x.n)
			label = bench.Ms(sh) + " (extrapolated)"
			points = append(points, scalePoint{series: "shell entrypoint", n: x.n, median: sh, p95: sh, extrapolate: true})
		}
		opRatio := bench.Ratio(x.wall.Median, x.op.Median)
		fmt.Printf("   %-9d %12s %12s %12s %14s %7.2fx %22s %9.1fx\n", x.n, bench.Ms(x.init.Median), bench.Ms(x.init.P95), bench.Ms(x.wall.Median),
			bench.Ms(x.op.Median), opRatio, label, sh/x.init.Median)
		fmt.Fprintf(&r.md, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %.1fx |\n", x.n, bench.Ms(x.init.Median), bench.Ms(x.init.P95), bench.Ms(x.wall.Median),
			bench.Ms(x.cpu.Median), bench.Ms(x.agent), bench.Ms(x.op.Median), ratioStr(opRatio), label, sh/x.init.Median)
	}
	r.md.WriteString("\n")
	if len(lr) > 0 {
		big := lr[len(lr)-1]
		bases := []measure{{"mpi-operator's entrypoint", big.op.Median, bench.Ms}}
		if s, ok := shell[big.n]; ok {
			bases = append(bases, measure{"nslookup + ssh true per host", s.Median, bench.Ms})
		}
		r.headline(fmt.Sprintf("start-up to the exec of the command, %d simulated workers (figure 3b)", big.n),
			measure{"podmpi", big.wall.Median, bench.Ms}, bases...)
	}
	if len(lr) > 0 {
		big := lr[len(lr)-1]
		r.note("Launcher init at N=%d by phase:", big.n)
		r.timeTable(fmt.Sprintf("scale-phases-%d", big.n), phaseRows(big.lines))
		var xs, ys []float64
		for _, x := range lr {
			xs, ys = append(xs, float64(x.n)), append(ys, x.init.Median)
		}
		slope := bench.LogSlope(xs, ys)
		last := math.NaN()
		if len(lr) >= 2 {
			a, b := lr[len(lr)-2], lr[len(lr)-1]
			last = bench.LogSlope([]float64{float64(a.n), float64(b.n)}, []float64{a.init.Median, b.init.Median})
		}
		r.note("Growth: log-log slope of init median against N = %.2f over all N, %.2f between the two largest N (1 = linear).", slope, last)
		if big.n == 1024 {
			r.check("launcher init, 1024 workers", bench.Ms(big.init.Median)+" median, "+bench.Ms(big.init.P95)+" p95", "< 2 s", big.init.Median < 2)
		} else {
			r.missing("launcher init, 1024 workers", "< 2 s", fmt.Errorf("largest N in --scale is %d", big.n))
		}
		if finite(last) {
			r.check("launcher init growth in N", fmt.Sprintf("slope %.2f (%d -> %d)", last, lr[len(lr)-2].n, big.n), "<= 1 (linear), 10% noise allowed", last <= 1.1)
		}
	}
	return points, nil
}

// simNetwork adds the simulated workers' addresses to pod 1, routes them
// from pod 0, and starts the DNS server answering their names.
func simNetwork(ctx context.Context, e *env, c *harness.Cluster, n int) error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		ip = "/usr/sbin/ip"
	}
	var batch strings.Builder
	var hosts strings.Builder
	svc := "sj." + "default.svc.cluster.local"
	for i := range n {
		a := simAddr(i)
		fmt.Fprintf(&batch, "address add %s/32 dev eth0\n", a)
		fmt.Fprintf(&hosts, "%s sw-%d.%s\n", a, i, svc)
	}
	// The launcher pod's own name too, which mpi-operator's entrypoint
	// looks up first (the launcher pod asks only this server).
	fmt.Fprintf(&hosts, "%s %s\n", c.Pod(0).IP, c.Pod(0).FQDN)
	bf := filepath.Join(e.work, "sim-addrs.batch")
	if err := os.WriteFile(bf, []byte(batch.String()), 0o644); err != nil {
		return err
	}
	run := func(args ...string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if b, err := exec.CommandContext(ctx, ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := run("-n", c.Pod(1).NetNS, "-batch", bf); err != nil {
		return err
	}
	if err := run("-n", c.Pod(0).NetNS, "route", "add", "10.200.0.0/16", "via", c.Pod(1).IP.String()); err != nil {
		return err
	}
	hf := filepath.Join(e.work, "sim-hosts")
	if err := os.WriteFile(hf, []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	dnsIP := c.Pod(1).IP.String()
	conf := filepath.Join(e.work, "sim-dnsmasq.conf")
	if err := os.WriteFile(conf, []byte(strings.Join([]string{
		"no-resolv", "no-hosts", "no-poll", "bind-interfaces", "listen-address=" + dnsIP, "port=53",
		"user=root", "group=root", "pid-file=", "log-facility=" + filepath.Join(e.work, "sim-dnsmasq.log"),
		"addn-hosts=" + hf, "local=/cluster.local/", "local=/sj/", "domain-needed", "bogus-priv", "local-ttl=5", "",
	}, "\n")), 0o644); err != nil {
		return err
	}
	dnsmasq, err := exec.LookPath("dnsmasq")
	if err != nil {
		dnsmasq = "/usr/sbin/dnsmasq"
	}
	p, err := c.Start(ctx, 1, -1, -1, nil, "", dnsmasq, "--keep-in-foreground", "--conf-file="+conf)
	if err != nil {
		return err
	}
	// The launcher pod asks that server: its resolv.conf, which `ip netns
	// exec` bind-mounts, is the harness's file under /etc/netns (removed by
	// Close), rewritten here with the same search list and options.
	resolv := filepath.Join("/etc/netns", c.Pod(0).NetNS, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver "+dnsIP+"\noptions ndots:5\n"), 0o644); err != nil {
		return err
	}
	last := simName(n - 1)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, code, err := c.Run(ctx, 0, uid, gid, e.baseEnv(), "getent", "hosts", last)
		if err == nil && code == 0 && strings.Contains(out, simAddr(n-1).String()) {
			break
		}
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			return fmt.Errorf("dnsmasq of the simulation exited: %v: %s", p.Wait(), b)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not resolve in the launcher pod after 15 s (getent exit %d, %v, %q)", last, code, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// simOrted writes the orted wrapper of the simulation (see scaleSection)
// into a directory of its own and returns that directory.
func (e *env) simOrted() (string, error) {
	dir := filepath.Join(e.work, "sim-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	script := "#!/bin/sh\n# every simulated worker's orted runs in the same pod: give each its own session directory\n" +
		"d=$(mktemp -d " + e.tmp + "/orted.XXXXXX) || exit 1\nTMPDIR=$d exec /usr/bin/orted \"$@\"\n"
	return dir, os.WriteFile(filepath.Join(dir, "orted"), []byte(script), 0o755)
}
