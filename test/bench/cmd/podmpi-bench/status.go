package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/e2e"
	"github.com/podmpi/podmpi/test/harness"
)

// statusSection is what Trainer's status API costs the launcher (3d): its
// init with the API's variables (a Trainer stand-in on loopback of its
// pod, as with the gate TrainJobStatus on) against without, at N simulated
// workers of the scale cluster, runs alternating; and how many requests
// each job sends Trainer. With the variables the launcher makes its
// endpoint (a certificate, a token, a listener) and asks every worker-agent
// to carry it before it runs the command.
func statusSection(ctx context.Context, o options, e *env, r *report, c *harness.Cluster, ns []int) error {
	r.heading("3d. Launcher init with Trainer's status API",
		"The scale cluster's launcher (`--discovery.template sw-{i}.sj --workers-expected N -- /bin/true`) with and without the three "+
			"KUBEFLOW_TRAINER_SERVER_* variables, pointing at a stand-in for Trainer's status endpoint on loopback of the launcher's pod. "+
			"With them the launcher reports its phases and end, makes the ranks' endpoint and asks each worker-agent to carry it "+
			"(one request per worker on its SSH connection, 32 at once). Runs alternate; the bound is 50 ms of init.")
	tr, err := e2e.StartFakeTrainer(c, 0, filepath.Join(e.work, "trainer"))
	if err != nil {
		return err
	}
	defer tr.Close()
	var rows []row
	for _, n := range ns {
		flags := []string{"--discovery.template", "sw-{i}.sj", "--workers-expected", strconv.Itoa(n),
			"--mpi.implementation", "openmpi4", "--discovery.timeout", "1m", "--probe.timeout", "1m"}
		rounds := 10
		if n >= 256 {
			rounds = 6
		}
		before := len(tr.Requests())
		spec := bench.Spec{Rounds: o.rounds(rounds, 2), Warmup: 1, Cmds: []bench.Cmd{
			{Name: fmt.Sprintf("launcher N=%d, no status API", n), Argv: e.launcherArgs(flags, "/bin/true"),
				Grep: bench.LauncherGrep, Timeout: 3 * time.Minute},
			{Name: fmt.Sprintf("launcher N=%d, status API", n), Argv: e.launcherArgs(flags, "/bin/true"), Env: tr.Env,
				Grep: bench.LauncherGrep, Timeout: 3 * time.Minute},
		}}
		res, err := e.timer(ctx, c, 0, spec)
		if err != nil {
			return err
		}
		runs := spec.Rounds + spec.Warmup
		requests := float64(len(tr.Requests())-before) / float64(runs)
		off, _ := phaseSeries(res[0].Lines, "", "")
		on, _ := phaseSeries(res[1].Lines, "", "")
		so, sn := bench.Summarize(off), bench.Summarize(on)
		fmt.Printf("   N=%-5d init median without %s, with %s (%+.1f ms); %.1f requests to Trainer per job\n", n,
			bench.Ms(so.Median), bench.Ms(sn.Median), (sn.Median-so.Median)*1000, requests)
		rows = append(rows,
			row{name: fmt.Sprintf("init N=%d, status API", n), samples: on, baseline: fmt.Sprintf("init N=%d, no status API", n)},
			row{name: fmt.Sprintf("init N=%d, no status API", n), samples: off},
		)
		r.note("N=%d: %.1f requests to Trainer per job (the first phase at once, then at most one per 5 s; the end's at exit).", n, requests)
		r.check(fmt.Sprintf("launcher init with Trainer's status API, N=%d", n), fmt.Sprintf("%+.1f ms (median %s vs %s)", (sn.Median-so.Median)*1000,
			bench.Ms(sn.Median), bench.Ms(so.Median)), "within 50 ms", sn.Median-so.Median <= 0.050)
	}
	r.timeTable("status", rows)
	return nil
}
