package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/harness"
)

// run takes every figure. A section that fails is reported and the others
// still run; the error says which failed.
func run(ctx context.Context, o options) error {
	if err := preflight(); err != nil {
		return err
	}
	start := time.Now()
	e, err := newEnv(ctx, o.binDir)
	if e != nil && e.work != "" {
		defer os.RemoveAll(e.work)
	}
	if err != nil {
		return fmt.Errorf("prepare %s: %w", e.work, err)
	}
	r := &report{}
	machine := describeMachine(ctx)
	fmt.Print(machine)

	var failed []string
	fail := func(section string, err error) {
		fmt.Printf("\n!! %s: %v\n", section, err)
		fmt.Fprintf(&r.md, "\n**%s failed:** `%s`\n\n", section, strings.ReplaceAll(tailStr(err.Error(), 600), "\n", " "))
		failed = append(failed, section)
	}
	if o.want("rsh") || o.want("mpi") || o.want("init") || o.want("mem") || o.want("tput") {
		if err := podsSections(ctx, o, e, r, fail); err != nil {
			fail("cluster", err)
		}
	}
	var points []scalePoint
	if o.want("scale") || o.want("footprint") || o.want("status") {
		var err error
		if points, err = scaleSection(ctx, o, e, r); err != nil {
			fail("scale", err)
		}
	}
	if len(points) > 0 {
		if err := plot(ctx, o.outDir, points); err != nil {
			fail("plot", err)
		}
	}
	r.printHeadlines()
	r.printTargets()
	took := time.Since(start).Round(time.Second)
	r.note("make bench took %s.", took)
	if err := r.write(o.outDir, machine+"\n"); err != nil {
		return fmt.Errorf("write results to %s: %w", o.outDir, err)
	}
	fmt.Printf("\n== results written to %s (raw.csv, summary.md, init-vs-n.csv, init-vs-n.png)\n", o.outDir)
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// preflight names what this machine lacks.
func preflight() error {
	var miss []string
	if err := harness.Preflight(); err != nil {
		miss = append(miss, err.Error())
	}
	for _, p := range []string{"/usr/bin/ssh", "/usr/sbin/sshd", "/usr/bin/nslookup"} {
		if _, err := os.Stat(p); err != nil {
			miss = append(miss, p+" missing (apt-get install -y openssh-client openssh-server bind9-dnsutils)")
		}
	}
	for _, p := range []string{"mpirun.openmpi", "mpicc.openmpi", "mpiexec.hydra", "mpicc.mpich"} {
		if _, err := exec.LookPath(p); err != nil {
			miss = append(miss, p+" missing (apt-get install -y openmpi-bin libopenmpi-dev mpich libmpich-dev)")
		}
	}
	if len(miss) > 0 {
		return errors.New(strings.Join(miss, "; "))
	}
	return nil
}

// describeMachine is the "Machine" section.
func describeMachine(ctx context.Context) string {
	first := func(name string, args ...string) string {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
		return "?"
	}
	grep := func(file, key string) string {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, key) {
				_, v, _ := strings.Cut(l, ":")
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}
	hydra := "?"
	if b, err := exec.CommandContext(ctx, "mpiexec.hydra", "--version").CombinedOutput(); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "Version:") {
				hydra = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "Version:"))
				break
			}
		}
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	str := func(b [65]int8) string {
		var s []byte
		for _, c := range b {
			if c == 0 {
				break
			}
			s = append(s, byte(c))
		}
		return string(s)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	commit := first("git", "rev-parse", "--short=12", "HEAD")
	var b strings.Builder
	fmt.Fprintf(&b, "## Machine (this run)\n\n")
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| date | %s |\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "| CPU | %s, %d logical CPUs |\n", grep("/proc/cpuinfo", "model name"), runtime.NumCPU())
	fmt.Fprintf(&b, "| memory | %s |\n", grep("/proc/meminfo", "MemTotal"))
	fmt.Fprintf(&b, "| kernel | %s %s |\n", str(uts.Sysname), str(uts.Release))
	fmt.Fprintf(&b, "| OS | %s |\n", osRelease())
	fmt.Fprintf(&b, "| load average at start | %s |\n", strings.TrimSpace(string(load)))
	fmt.Fprintf(&b, "| Go (this driver) | %s |\n", runtime.Version())
	fmt.Fprintf(&b, "| podmpi | commit %s; binaries from `make build` |\n", commit)
	fmt.Fprintf(&b, "| OpenSSH | %s |\n", first("/usr/bin/ssh", "-V"))
	fmt.Fprintf(&b, "| Open MPI | %s |\n", first("mpirun.openmpi", "--version"))
	fmt.Fprintf(&b, "| MPICH (Hydra) | %s |\n", hydra)
	fmt.Fprintf(&b, "| dnsmasq | %s |\n", first("dnsmasq", "--version"))
	return b.String()
}

func osRelease() string {
	b, _ := os.ReadFile("/etc/os-release")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "?"
}

// podsSections are figures 1, 2, 3 (N = 3), 4 and 5 on one cluster: pod 0
// the launcher and client, pods 1..3 workers each running worker-agent
// (2222) and sshd (2223).
func podsSections(ctx context.Context, o options, e *env, r *report, fail func(string, error)) error {
	const job = "bj"
	etc := e.etcFiles()
	pods := []harness.PodSpec{{Hostname: job + "-launcher-0-0", Role: harness.RoleLauncher, Publish: true, EtcFiles: etc}}
	for i := range 3 {
		pods = append(pods, harness.PodSpec{Hostname: fmt.Sprintf("%s-node-0-%d", job, i), Role: harness.RoleWorker, Publish: true, EtcFiles: etc})
	}
	c, err := harness.Start(ctx, harness.Config{Job: job, Pods: pods, LogDir: filepath.Join(e.work, "log-pods")})
	if err != nil {
		return err
	}
	defer closeCluster(c)
	fmt.Printf("\n== cluster %s: launcher pod + 3 worker pods (network namespaces, cluster DNS at %s), everything as uid %d\n", c.ID(), c.HubIP(), uid)
	agents := map[int]*harness.Proc{}
	sshds := map[int]*harness.Proc{}
	for pod := 1; pod <= 3; pod++ {
		a, s, err := e.startServers(ctx, c, pod, 0, 2, "", serverOpts{})
		if err != nil {
			return err
		}
		agents[pod], sshds[pod] = a, s
	}
	// Idle memory first, before any session ran.
	time.Sleep(500 * time.Millisecond)
	idle, err := idleMem(agents[1].PID(), sshds[1].PID())
	if err != nil {
		fail("memory (idle)", err)
	}
	host := c.Pod(1).ShortName
	if o.want("rsh") {
		if err := rshSection(ctx, o, e, r, c, host); err != nil {
			fail("remote command", err)
		}
	}
	if o.want("mpi") {
		if err := mpiSection(ctx, o, e, r, c); err != nil {
			fail("mpi", err)
		}
	}
	if o.want("init") {
		if err := initSection(ctx, o, e, r, c); err != nil {
			fail("launcher init (3 pods)", err)
		}
	}
	if o.want("mem") && idle != nil {
		if err := memSection(ctx, o, e, r, c, idle, agents[1], sshds[1], host); err != nil {
			fail("memory", err)
		}
	}
	if o.want("tput") {
		if err := tputSection(ctx, o, e, r, c, host); err != nil {
			fail("throughput", err)
		}
	}
	return nil
}

// closeCluster tears c down and says what, if anything, was left.
func closeCluster(c *harness.Cluster) {
	if err := c.Close(); err != nil {
		fmt.Printf("!! teardown of cluster %s: %v (make clean-stale removes leftovers)\n", c.ID(), err)
		return
	}
	fmt.Printf("== cluster %s torn down\n", c.ID())
}

// rshSection is figure 1.
func rshSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster, host string) error {
	r.heading("1. One remote command: connect, authenticate, exec `true`, close",
		fmt.Sprintf("Client in the launcher pod, server in worker pod `%s`, both as uid %d; the name resolves through the cluster DNS each time. "+
			"OpenSSH runs with the options mpi-operator passes (default algorithms); every client and server uses the job's P-521 key. "+
			"`launcher rsh` is the first command to a worker: its own connection and handshake. `podmpi-rsh, shared connection` is make build's "+
			"relay started under a running launcher (PODMPI_RSH_SOCKET set), which runs the session on the connection its probe made; "+
			"`podmpi-rsh, no launcher` is the relay where no launcher shares, running the launcher's full client. "+
			"`ssh, held connection (ControlMaster) -> sshd` is OpenSSH's own connection sharing, the fair baseline of the shared connection: "+
			"a master connection to sshd opened before the rounds and held (`ssh -M -N -S <socket>`, as ControlMaster with ControlPersist keeps one), "+
			"each command a client on its socket (`ssh -S <socket> -o ControlMaster=no ...`), which opens a new session on that connection.", host, uid))
	sock, stop, err := e.sharingLauncher(ctx, c, []string{host})
	if err != nil {
		return err
	}
	defer stop()
	cm, master, err := e.controlMaster(ctx, c, sshdPort, host)
	if err != nil {
		return err
	}
	defer func() { _ = master.Stop() }()
	rsh, rshEnv := e.rsh(host, "true")
	shared, sharedEnv := e.relay(sock, host, "true")
	own, ownEnv := e.relay("", host, "true")
	const (
		first    = "launcher rsh -> worker-agent"
		relayed  = "podmpi-rsh, shared connection -> worker-agent"
		held     = "ssh, held connection (ControlMaster) -> sshd"
		baseline = "ssh -> sshd"
	)
	spec := bench.Spec{Rounds: o.rounds(40, 5), Warmup: 3, Cmds: []bench.Cmd{
		{Name: first, Argv: rsh, Env: rshEnv, Timeout: 30 * time.Second},
		{Name: relayed, Argv: shared, Env: sharedEnv, Timeout: 30 * time.Second},
		{Name: "podmpi-rsh, no launcher -> worker-agent", Argv: own, Env: ownEnv, Timeout: 30 * time.Second},
		{Name: "ssh -> worker-agent", Argv: e.ssh(agentPort, host, "true"), Timeout: 30 * time.Second},
		{Name: held, Argv: e.sshShared(cm, sshdPort, host, "true"), Timeout: 30 * time.Second},
		{Name: baseline, Argv: e.ssh(sshdPort, host, "true"), Timeout: 30 * time.Second},
	}}
	res, err := e.timer(ctx, c, 0, spec)
	if err != nil {
		return err
	}
	// A client whose master is gone connects on its own without a word:
	// the held-connection figures count only if the master ran throughout.
	if err := e.checkMaster(ctx, c, cm, host); err != nil {
		return fmt.Errorf("the OpenSSH control master was not running after the rounds, so %q may have made its own connections: %w", held, err)
	}
	var rows []row
	for _, x := range res[:len(res)-1] {
		rows = append(rows, row{name: x.Name, samples: x.Seconds, baseline: baseline})
	}
	sum := r.timeTable("rsh", append(rows, row{name: baseline, samples: res[len(res)-1].Seconds}))
	base := sum[baseline].Median
	ratio := bench.Ratio(sum[first].Median, base)
	r.check("`launcher rsh` round trip (first command to a worker) vs OpenSSH ssh to sshd", fmt.Sprintf("%.3f (%s vs %s)", ratio,
		bench.Ms(sum[first].Median), bench.Ms(base)), "<= 0.1", ratio <= 0.1)
	ratio = bench.Ratio(sum[relayed].Median, base)
	r.check("`podmpi-rsh` on the launcher's shared connection vs OpenSSH ssh to sshd", fmt.Sprintf("%.3f (%s vs %s)", ratio,
		bench.Ms(sum[relayed].Median), bench.Ms(base)), "<= 0.02", ratio <= 0.02)
	ratio = bench.Ratio(sum[relayed].Median, sum[held].Median)
	r.check("`podmpi-rsh` on the launcher's shared connection vs OpenSSH on a held connection (ControlMaster)", fmt.Sprintf("%.2f (%s vs %s)", ratio,
		bench.Ms(sum[relayed].Median), bench.Ms(sum[held].Median)), "<= 1", ratio <= 1)
	r.headline("one command on a held connection: `podmpi-rsh` on the launcher's shared connection (figure 1)",
		measure{"podmpi", sum[relayed].Median, bench.Ms},
		measure{"OpenSSH ControlMaster", sum[held].Median, bench.Ms}, measure{"OpenSSH", base, bench.Ms})
	r.headline("first command to a worker, its own connection: `launcher rsh` (figure 1)",
		measure{"podmpi", sum[first].Median, bench.Ms}, measure{"OpenSSH", base, bench.Ms})
	return nil
}

// mpiSection is figure 2.
func mpiSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster) error {
	var names []string
	for pod := 1; pod <= 3; pod++ {
		names = append(names, c.Pod(pod).ShortName)
	}
	r.heading("2. MPI jobs over 3 worker pods x 2 slots",
		"podmpi: the whole `launcher --workers "+strings.Join(names, ",")+" -- <mpirun ...>` run (discovery, slots from each worker-agent's /info, "+
			"hostfile, SSH probe of every worker, MPI detection, then mpirun with `launcher rsh` as its ssh program, to the end of the job). "+
			"podmpi, plain mpirun: the same job started as `mpirun --hostfile <hostfile> ...` (`mpiexec.hydra -f` for MPICH) with make build's bin/ first on PATH, "+
			"as the Kubeflow SDK starts it: podmpi's mpirun runs the same phases with its settings from PODMPI_* variables, then the real mpirun. "+
			"OpenSSH: the same mpirun with a hostfile and `/usr/bin/ssh` to sshd. The allreduce is test/e2e/testdata/allreduce.c.")
	ompiHF := filepath.Join(e.work, "hosts-ompi")
	mpichHF := filepath.Join(e.work, "hosts-mpich")
	var a, b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&a, "%s slots=2\n", n)
		fmt.Fprintf(&b, "%s:2\n", n)
	}
	if err := os.WriteFile(ompiHF, []byte(a.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(mpichHF, []byte(b.String()), 0o644); err != nil {
		return err
	}
	sshArgs := strings.Join(e.sshArgs(sshdPort), " ")
	ompiEnv := []string{"OMPI_MCA_orte_keep_fqdn_hostnames=1", "OMPI_MCA_plm_rsh_agent=/usr/bin/ssh", "OMPI_MCA_plm_rsh_args=" + sshArgs}
	mpichEnv := []string{"HYDRA_LAUNCHER=ssh", "HYDRA_LAUNCHER_EXEC=/usr/bin/ssh", "HYDRA_LAUNCHER_EXTRA_ARGS=" + sshArgs, "HYDRA_IFACE=eth0"}
	workers := []string{"--workers", strings.Join(names, ",")}
	const to = 90 * time.Second
	type job struct{ label, mpirun, prog string }
	jobs := []job{
		{"OpenMPI hostname", "mpirun.openmpi", "hostname"},
		{"MPICH hostname", "mpiexec.hydra", "hostname"},
		{"OpenMPI allreduce", "mpirun.openmpi", e.progs["allreduce-ompi"]},
		{"MPICH allreduce", "mpiexec.hydra", e.progs["allreduce-mpich"]},
	}
	var cmds []bench.Cmd
	for _, j := range jobs {
		cmds = append(cmds, bench.Cmd{Name: j.label + " podmpi", Argv: e.launcherArgs(workers, j.mpirun, "-np", "6", j.prog), Grep: bench.LauncherGrep, Timeout: to})
		if j.mpirun == "mpirun.openmpi" {
			cmds = append(cmds,
				bench.Cmd{Name: j.label + " podmpi, plain mpirun", Argv: []string{filepath.Join(e.bin, "mpirun"), "--hostfile", ompiHF, "-np", "6", j.prog},
					Env: e.shimEnv(), Grep: bench.LauncherGrep, Timeout: to},
				bench.Cmd{Name: j.label + " OpenSSH", Argv: []string{"mpirun.openmpi", "--hostfile", ompiHF, "-np", "6", j.prog}, Env: ompiEnv, Timeout: to})
		} else {
			cmds = append(cmds,
				// Trainer's "host slots=N" hostfile, which Hydra itself
				// rejects: podmpi's mpiexec.hydra hands it its own.
				bench.Cmd{Name: j.label + " podmpi, plain mpirun", Argv: []string{filepath.Join(e.bin, "mpiexec.hydra"), "-f", ompiHF, "-np", "6", j.prog},
					Env: e.shimEnv(), Grep: bench.LauncherGrep, Timeout: to},
				bench.Cmd{Name: j.label + " OpenSSH", Argv: []string{"mpiexec.hydra", "-f", mpichHF, "-np", "6", j.prog}, Env: mpichEnv, Timeout: to})
		}
	}
	res, err := e.timer(ctx, c, 0, bench.Spec{Rounds: o.rounds(15, 3), Warmup: 2, Cmds: cmds})
	if err != nil {
		return err
	}
	var rows []row
	for i := 0; i < len(res); i += 3 {
		rows = append(rows,
			row{name: res[i].Name, samples: res[i].Seconds, baseline: res[i+2].Name},
			row{name: res[i+1].Name, samples: res[i+1].Seconds, baseline: res[i+2].Name},
			row{name: res[i+2].Name, samples: res[i+2].Seconds})
	}
	sum := r.timeTable("mpi", rows)
	// Where the podmpi time goes.
	var prow []row
	for i := 0; i < len(res); i += 3 {
		for _, k := range []int{i, i + 1} {
			init, mpirun := phaseSeries(res[k].Lines, "", "mpirun")
			prow = append(prow, row{name: res[k].Name + ": init", samples: init, baseline: "-"},
				row{name: res[k].Name + ": mpirun phase", samples: mpirun, baseline: "-"})
		}
	}
	r.note("podmpi runs split into the launcher's init (start to the exec of mpirun) and its mpirun phase, from its JSON log:")
	r.timeTable("mpi-phases", prow)
	for _, mpi := range []string{"OpenMPI", "MPICH"} {
		p, plain, b := sum[mpi+" hostname podmpi"], sum[mpi+" hostname podmpi, plain mpirun"], sum[mpi+" hostname OpenSSH"]
		ratio := bench.Ratio(p.Median, b.Median)
		r.check("`mpirun -np 6 hostname` "+mpi+", podmpi vs OpenSSH", fmt.Sprintf("%.2f (%s vs %s)", ratio, bench.Ms(p.Median), bench.Ms(b.Median)), "<= 0.7", ratio <= 0.7)
		ratio = bench.Ratio(plain.Median, b.Median)
		r.check("`mpirun -np 6 hostname` "+mpi+", podmpi's plain mpirun vs OpenSSH", fmt.Sprintf("%.2f (%s vs %s)", ratio, bench.Ms(plain.Median), bench.Ms(b.Median)), "<= 0.7", ratio <= 0.7)
		ratio = bench.Ratio(plain.Median, p.Median)
		r.check("`mpirun -np 6 hostname` "+mpi+", podmpi's plain mpirun vs `launcher --`", fmt.Sprintf("%.2f (%s vs %s)", ratio, bench.Ms(plain.Median), bench.Ms(p.Median)), "<= 1.1", ratio <= 1.1)
		label := map[string]string{"OpenMPI": "Open MPI", "MPICH": "MPICH"}[mpi]
		r.headline("`mpirun -np 6 hostname` over 3 worker pods, "+label+", the whole `launcher -- mpirun ...` (figure 2)",
			measure{"podmpi", p.Median, bench.Ms}, measure{"OpenSSH", b.Median, bench.Ms})
	}
	return nil
}

// phaseSeries extracts, per run, the init seconds and the seconds of phase
// (when phase is not "") from kept launcher log lines.
func phaseSeries(lines [][]string, _ string, phase string) (init, ph []float64) {
	for _, l := range lines {
		p, err := bench.ParseLauncherLog(l)
		if err != nil {
			continue
		}
		init = append(init, p.Init)
		if phase != "" {
			ph = append(ph, p.Phases[phase])
		}
	}
	return init, ph
}

// sshEntrypoint is one baseline of figure 3: a launcher entrypoint that
// waits until every worker name resolves (nslookup loop), then until each
// answers ssh (ssh host true), one host after the other, as hand-made
// entrypoints of OpenSSH images do.
const sshEntrypoint = `#!/bin/sh
# usage: entrypoint.sh HOSTLIST PORT KEY USER
set -u
hosts=$1 port=$2 key=$3 user=$4
while read -r h; do
  until nslookup "$h" >/dev/null 2>&1; do sleep 1; done
done < "$hosts"
while read -r h; do
  until ssh -n -p "$port" -i "$key" -l "$user" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
      -o LogLevel=ERROR -o BatchMode=yes -o ConnectionAttempts=10 "$h" true; do
    sleep 1
  done
done < "$hosts"
exec /bin/true
`

// mpiOperatorEntrypoint is the other baseline of figure 3: what the
// launcher entrypoint of mpi-operator's own MPICH and Intel MPI images does
// (build/base/entrypoint.sh in kubeflow/mpi-operator, v0.5.0 to v0.8),
// written out here step for step. It looks up its own host name, then each
// host of the hostfile (the part of each line before ':', the MPICH and
// Intel MPI format mpi-operator writes), one after the other, with
// nslookup; a lookup that fails is tried again up to 10 times after a sleep
// that starts at 0.1 s and doubles, and a name that never resolves is
// reported and skipped. Then it execs the command. It checks no SSH.
const mpiOperatorEntrypoint = `#!/bin/bash
# usage: mpi-operator-entrypoint.sh SELF HOSTFILE COMMAND...
self=$1 hostfile=$2
shift 2
resolve() {
  local n=0 pause=0.1
  until nslookup $1 >/dev/null; do
    if [ $n -eq 10 ]; then
      echo "Couldn't resolve $1"
      return
    fi
    sleep $pause
    echo "Couldn't resolve $1... Retrying"
    n=$((n + 1))
    pause=$(awk -v p=$pause 'BEGIN { print p + p }')
  done
  echo "Resolved $1"
}
resolve "$self"
cut -d ':' -f 1 "$hostfile" | while read -r h; do
  resolve "$h"
done
exec "$@"
`

// writeEntrypoints writes both baselines' scripts and their host lists for
// hosts (tag names the lists): the list of the ssh one (one name a line),
// and an MPICH-format hostfile (name:1) for mpi-operator's.
func (e *env) writeEntrypoints(hosts []string, tag string) (sshScript, sshList, opScript, opHostfile string, err error) {
	sshScript = filepath.Join(e.work, "entrypoint.sh")
	opScript = filepath.Join(e.work, "mpi-operator-entrypoint.sh")
	for _, f := range []struct{ path, text string }{{sshScript, sshEntrypoint}, {opScript, mpiOperatorEntrypoint}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o755); err != nil {
			return "", "", "", "", err
		}
	}
	sshList = filepath.Join(e.work, "hosts-"+tag)
	if err := os.WriteFile(sshList, []byte(strings.Join(hosts, "\n")+"\n"), 0o644); err != nil {
		return "", "", "", "", err
	}
	var hf strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&hf, "%s:1\n", h)
	}
	opHostfile = filepath.Join(e.work, "hostfile-mpich-"+tag)
	return sshScript, sshList, opScript, opHostfile, os.WriteFile(opHostfile, []byte(hf.String()), 0o644)
}

// Names of figure 3's baselines.
const (
	sshEntrypointName = "shell entrypoint (nslookup + ssh true per host)"
	opEntrypointName  = "mpi-operator entrypoint (nslookup per host)"
)

// initSection is figure 3 for the 3 worker pods.
func initSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster) error {
	var hosts []string
	for pod := 1; pod <= 3; pod++ {
		hosts = append(hosts, c.Pod(pod).ShortName)
	}
	self := c.Pod(0).ShortName
	r.heading("3a. Launcher init, 3 worker pods (workers already up)",
		"`launcher --discovery.template bj-node-0-{i}.bj --workers-expected 3 --mpi.implementation openmpi4 -- /bin/true`: wall time of the whole process, "+
			"and its init (start to the exec of the command) by phase from its JSON log. "+
			"Baselines: mpi-operator's own launcher entrypoint (its MPICH and Intel MPI images: nslookup of its own name, then of each host of the hostfile "+
			"with up to 10 retries after a sleep doubling from 0.1 s, then exec; no SSH check), the fair one; and a shell entrypoint that also waits for "+
			"`ssh host true` per host, against sshd. Both exec /bin/true as the launcher does.")
	sshScript, sshList, opScript, opHostfile, err := e.writeEntrypoints(hosts, "pods")
	if err != nil {
		return err
	}
	const launcherName = "launcher (init + exec /bin/true)"
	spec := bench.Spec{Rounds: o.rounds(20, 3), Warmup: 2, Cmds: []bench.Cmd{
		{Name: launcherName, Argv: e.launcherArgs([]string{"--discovery.template", "bj-node-0-{i}.bj", "--workers-expected", "3",
			"--mpi.implementation", "openmpi4"}, "/bin/true"), Grep: bench.LauncherGrep, Timeout: time.Minute},
		{Name: opEntrypointName, Argv: []string{"/bin/bash", opScript, self, opHostfile, "/bin/true"}, Timeout: time.Minute},
		{Name: sshEntrypointName, Argv: []string{"/bin/sh", sshScript, sshList, strconv.Itoa(sshdPort), e.key, user}, Timeout: time.Minute},
	}}
	res, err := e.timer(ctx, c, 0, spec)
	if err != nil {
		return err
	}
	rows := []row{
		{name: res[0].Name, samples: res[0].Seconds, baseline: opEntrypointName},
		{name: res[1].Name, samples: res[1].Seconds},
		{name: res[2].Name, samples: res[2].Seconds, baseline: opEntrypointName},
	}
	rows = append(rows, phaseRows(res[0].Lines)...)
	sum := r.timeTable("init3", rows)
	r.headline("start-up to the exec of the command, 3 worker pods already up (figure 3a)",
		measure{"podmpi", sum[launcherName].Median, bench.Ms},
		measure{"mpi-operator's entrypoint", sum[opEntrypointName].Median, bench.Ms},
		measure{"nslookup + ssh true per host", sum[sshEntrypointName].Median, bench.Ms})
	return nil
}

// phaseRows turns launcher logs into one row for init and one per phase.
func phaseRows(lines [][]string) []row {
	byPhase := map[string][]float64{}
	var order []string
	var init []float64
	for _, l := range lines {
		p, err := bench.ParseLauncherLog(l)
		if err != nil {
			continue
		}
		init = append(init, p.Init)
		for _, ph := range p.Order {
			if _, ok := byPhase[ph]; !ok {
				order = append(order, ph)
			}
			byPhase[ph] = append(byPhase[ph], p.Phases[ph])
		}
	}
	rows := []row{{name: "  init (start to exec)", samples: init, baseline: "-"}}
	for _, ph := range order {
		rows = append(rows, row{name: "    phase " + ph, samples: byPhase[ph], baseline: "-"})
	}
	return rows
}
