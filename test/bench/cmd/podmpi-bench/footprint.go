package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/harness"
)

// footprintSleep is how long every rank sleeps: long enough that every
// daemon is up and every rsh/ssh child connected while the sampler runs.
// 3 s was not: on a loaded machine OpenSSH's P-521 handshakes to the one
// sshd of the simulation took longer than that for 64 workers, so the
// first ssh children ended before the last ones connected, and the peak
// counted only part of them (63 of 64 at best).
const footprintSleep = "8"

// footRun is the peak footprint of the launcher pod during one job.
type footRun struct {
	mpi, transport string
	n              int
	peak           bench.Footprint
	samples        int
}

// footprintSection is figure 3c, on the scale simulation's cluster: the
// launcher pod's total memory and open descriptors at their peak while a
// real MPI job over N simulated workers runs, for Open MPI and Hydra, with
// podmpi (launcher -> mpirun -> podmpi-rsh per worker) and with OpenSSH
// (mpirun -> ssh per worker, as mpi-operator's launcher runs it).
func footprintSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster) error {
	r.heading("3c. Launcher pod footprint with N workers (memory and open descriptors)",
		"Every process in the launcher pod, summed at the peak while a real MPI job runs over N simulated workers (the 3b cluster: one worker-agent "+
			"and one sshd serve every worker address): podmpi is `launcher --discovery.template sw-{i}.sj ... -- mpirun sleep "+footprintSleep+"` (the launcher, "+
			"mpirun, one podmpi-rsh per worker); OpenSSH is the same mpirun with a hostfile and /usr/bin/ssh to sshd (mpirun, one ssh per worker). "+
			"Open MPI: `mpirun.openmpi` (one orted per worker, all started from the launcher pod up to 64 workers; `routed=direct` for both, as every simulated orted "+
			"reports the same host name); Hydra: `mpiexec.hydra` (MPICH 4.0.2). "+
			"Sampled every 100 ms from /proc: RSS and PSS from smaps_rollup, descriptors from /proc/<pid>/fd; each column is its own peak. "+
			"The workers' side (orted, proxies, ranks) is not counted.")
	sshArgs := strings.Join(e.sshArgs(sshdPort), " ")
	var runs []footRun
	for _, mpi := range []string{"OpenMPI", "Hydra"} {
		for _, n := range o.footNs {
			hf := filepath.Join(e.work, fmt.Sprintf("foot-%s-%d", mpi, n))
			var b strings.Builder
			for i := range n {
				if mpi == "OpenMPI" {
					fmt.Fprintf(&b, "%s slots=1\n", simName(i))
				} else {
					fmt.Fprintf(&b, "%s:1\n", simName(i))
				}
			}
			if err := os.WriteFile(hf, []byte(b.String()), 0o644); err != nil {
				return err
			}
			disc := []string{"--discovery.template", "sw-{i}.sj", "--workers-expected", strconv.Itoa(n), "--slots", "1",
				"--discovery.timeout", "1m", "--probe.timeout", "1m", "--mpirun.timeout", "2m"}
			type job struct {
				transport string
				argv, env []string
			}
			var jobs []job
			if mpi == "OpenMPI" {
				// Every simulated worker's orted runs in the same pod and so
				// reports the same host name, which confuses ORTE's routing
				// tree now and then ("does not know how to route a message");
				// direct routing (one connection per daemon, as the tree has
				// up to 64 workers anyway) avoids that for both transports.
				direct := "OMPI_MCA_routed=direct"
				jobs = []job{
					{"podmpi", e.launcherArgs(append(disc, "--mpi.implementation", "openmpi4"), "mpirun.openmpi", "sleep", footprintSleep), []string{direct}},
					{"OpenSSH", []string{"mpirun.openmpi", "--hostfile", hf, "-np", strconv.Itoa(n), "sleep", footprintSleep},
						[]string{direct, "OMPI_MCA_orte_keep_fqdn_hostnames=1", "OMPI_MCA_plm_rsh_agent=/usr/bin/ssh", "OMPI_MCA_plm_rsh_args=" + sshArgs}},
				}
			} else {
				jobs = []job{
					{"podmpi", e.launcherArgs(append(disc, "--mpi.implementation", "mpich"), "mpiexec.hydra", "sleep", footprintSleep), nil},
					{"OpenSSH", []string{"mpiexec.hydra", "-f", hf, "-np", strconv.Itoa(n), "sleep", footprintSleep},
						[]string{"HYDRA_LAUNCHER=ssh", "HYDRA_LAUNCHER_EXEC=/usr/bin/ssh", "HYDRA_LAUNCHER_EXTRA_ARGS=" + sshArgs, "HYDRA_IFACE=eth0"}},
				}
			}
			for _, j := range jobs {
				fr, err := footprintRun(ctx, e, c, j.argv, j.env)
				if err != nil {
					return fmt.Errorf("%s N=%d %s: %w", mpi, n, j.transport, err)
				}
				fr.mpi, fr.transport, fr.n = mpi, j.transport, n
				runs = append(runs, fr)
				fmt.Printf("   %-7s N=%-4d %-7s peak: %3d processes, RSS %s, PSS %s, %5d fds (most in one process: %d, %s) [%d samples]\n",
					mpi, n, j.transport, fr.peak.Procs, mb(float64(fr.peak.Mem.RSS)), mb(float64(fr.peak.Mem.PSS)), fr.peak.FDs, fr.peak.MaxFDs, fr.peak.MaxFDP, fr.samples)
				r.addRaw("footprint", fmt.Sprintf("%s N=%d %s RSS", mpi, n, j.transport), []float64{float64(fr.peak.Mem.RSS)}, "B")
				r.addRaw("footprint", fmt.Sprintf("%s N=%d %s PSS", mpi, n, j.transport), []float64{float64(fr.peak.Mem.PSS)}, "B")
				r.addRaw("footprint", fmt.Sprintf("%s N=%d %s fds", mpi, n, j.transport), []float64{float64(fr.peak.FDs)}, "fds")
				r.addRaw("footprint", fmt.Sprintf("%s N=%d %s processes", mpi, n, j.transport), []float64{float64(fr.peak.Procs)}, "procs")
			}
		}
	}
	fmt.Fprintf(&r.md, "| MPI | N | podmpi: processes | RSS | PSS | fds (most in one process) | OpenSSH: processes | RSS | PSS | fds (most in one process) | RSS ratio | PSS ratio | fds ratio |\n")
	fmt.Fprintf(&r.md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := 0; i+1 < len(runs); i += 2 {
		p, s := runs[i], runs[i+1]
		fmt.Fprintf(&r.md, "| %s | %d | %d | %s | %s | %d (%d) | %d | %s | %s | %d (%d) | %.2f | %.2f | %.2f |\n", p.mpi, p.n,
			p.peak.Procs, mb(float64(p.peak.Mem.RSS)), mb(float64(p.peak.Mem.PSS)), p.peak.FDs, p.peak.MaxFDs,
			s.peak.Procs, mb(float64(s.peak.Mem.RSS)), mb(float64(s.peak.Mem.PSS)), s.peak.FDs, s.peak.MaxFDs,
			bench.Ratio(float64(p.peak.Mem.RSS), float64(s.peak.Mem.RSS)), bench.Ratio(float64(p.peak.Mem.PSS), float64(s.peak.Mem.PSS)),
			bench.Ratio(float64(p.peak.FDs), float64(s.peak.FDs)))
	}
	r.md.WriteString("\n")
	// The headline: the smallest and the largest job of each MPI, where
	// the launcher process weighs most and least.
	for i := 0; i+1 < len(runs); i += 2 {
		p, s := runs[i], runs[i+1]
		if p.n != o.footNs[0] && p.n != o.footNs[len(o.footNs)-1] {
			continue
		}
		mpi := map[string]string{"OpenMPI": "Open MPI", "Hydra": "Hydra (MPICH)"}[p.mpi]
		r.headline(fmt.Sprintf("launcher pod's memory at the peak, PSS, %d workers, %s (figure 3c)", p.n, mpi),
			measure{"podmpi", float64(p.peak.Mem.PSS), mb}, measure{"OpenSSH", float64(s.peak.Mem.PSS), mb})
	}
	return nil
}

// footprintRun starts argv in the launcher pod (pod 0) as uid, samples the
// footprint of its process tree every 100 ms until it exits, and returns the
// peaks. A job that fails is an error with the end of its output.
func footprintRun(ctx context.Context, e *env, c *harness.Cluster, argv, extraEnv []string) (footRun, error) {
	env := append(e.baseEnv(), extraEnv...)
	p, err := c.Start(ctx, 0, uid, gid, env, "", argv[0], argv[1:]...)
	if err != nil {
		return footRun{}, err
	}
	var fr footRun
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(3 * time.Minute)
	for {
		if table, err := bench.Procs(); err == nil {
			if _, alive := table[p.PID()]; alive {
				fr.peak = fr.peak.Peak(bench.TreeFootprint(table, p.PID()))
				fr.samples++
			}
		}
		select {
		case <-p.Done():
			if err := p.Wait(); err != nil {
				b, _ := os.ReadFile(p.Log)
				return fr, fmt.Errorf("%s: %v: %s", argv[0], err, tailStr(string(b), 5000))
			}
			return fr, nil
		case <-deadline:
			_ = p.Stop()
			b, _ := os.ReadFile(p.Log)
			return fr, fmt.Errorf("%s still running after 3 minutes: %s", argv[0], tailStr(string(b), 1500))
		case <-ctx.Done():
			_ = p.Stop()
			return fr, ctx.Err()
		case <-tick.C:
		}
	}
}
