// Command podmpi-bench is `make bench` (scripts/bench.sh builds it and runs
// it as root): every figure of BENCHMARKS.md next to its baseline, taken in
// the same run on network-namespace pods with cluster DNS (test/harness):
//
//  1. one remote command (connect, auth, exec true, close): launcher rsh to
//     worker-agent, podmpi-rsh on the launcher's shared connection, OpenSSH
//     ssh to worker-agent, OpenSSH ssh to sshd, and OpenSSH on a held
//     connection to sshd (ControlMaster: the fair baseline of the shared
//     connection);
//  2. mpirun -np 6 hostname and an MPI allreduce over 3 worker pods x 2
//     slots, OpenMPI and MPICH, through `launcher --` and worker-agent,
//     through podmpi's plain mpirun (make build's bin/ first on PATH, the
//     Kubeflow SDK's way of starting MPI), and through OpenSSH ssh and sshd;
//  3. launcher init by phase for 3 pods, and a scale simulation for 16 to
//     1024 workers (one worker-agent serving N addresses, a DNS server
//     answering N names), against mpi-operator's own launcher entrypoint
//     (nslookup per host with retries, then exec; the fair baseline) and a
//     shell entrypoint that also waits for ssh host true per host; on the same
//     simulation, the launcher pod's peak memory and open descriptors while
//     a real Open MPI and Hydra job runs over N workers, against mpirun
//     with OpenSSH;
//  4. worker-agent idle RSS and per-session memory, against sshd;
//  5. session stdout throughput (1 GiB), against OpenSSH;
//  6. the plot of launcher init time against N (PNG, via matplotlib);
//  7. the headline table: each podmpi figure the README quotes against the
//     best baseline measured beside it.
//
// Each command and its baseline run interleaved, round after round, in one
// timer process inside the client pod (the "timer" subcommand of this
// binary), so that both see the same machine load. Results are printed with
// median, p95 and the ratio to the baseline, and written under --out:
// raw.csv (every sample), summary.md (the tables), init-vs-n.csv and
// init-vs-n.png.
//
// Everything runs as uid 2000 ("mpiuser" in the pods' own /etc/passwd,
// which the harness bind-mounts; the host's passwd is not touched), so that
// the non-root sshd baseline can log its own user in. Every process is
// started through the harness and killed by PID, and every namespace is
// removed, when the run ends or is interrupted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/test/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "timer" {
		os.Exit(timerMain(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.binDir, "bin", "bin", "directory holding the launcher and worker-agent binaries (make build)")
	flag.StringVar(&o.outDir, "out", "docs/bench", "directory receiving raw.csv, summary.md, init-vs-n.csv and init-vs-n.png")
	flag.StringVar(&o.scale, "scale", "16,64,256,1024", "worker counts of the launcher scale simulation")
	flag.StringVar(&o.shellScale, "shell-scale", "16,64,256", "worker counts at which the shell entrypoint baseline is measured (larger ones are extrapolated)")
	flag.StringVar(&o.footprint, "footprint", "8,32,64", "worker counts of the launcher pod footprint (memory, descriptors) under Open MPI and Hydra")
	flag.Float64Var(&o.reps, "reps", 1, "multiply every repetition count by this (0.3 for a quick look)")
	flag.StringVar(&o.only, "only", "", "comma-separated sections to run (rsh,mpi,init,mem,tput,scale,status,footprint); empty runs all")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Hour, "overall deadline (the baselines at 1024 simulated workers alone take 10-20 minutes on a loaded machine)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "podmpi-bench: needs root (network namespaces, bind mounts, a DNS server); run: sudo make bench")
		os.Exit(1)
	}
	var err error
	if o.scaleNs, err = parseInts(o.scale); err != nil {
		fatal(fmt.Errorf("--scale: %w", err))
	}
	if o.shellNs, err = parseInts(o.shellScale); err != nil {
		fatal(fmt.Errorf("--shell-scale: %w", err))
	}
	if o.footNs, err = parseInts(o.footprint); err != nil {
		fatal(fmt.Errorf("--footprint: %w", err))
	}
	if o.reps <= 0 || o.reps > 10 {
		fatal(errors.New("--reps must be in (0, 10]"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err = run(ctx, o)
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "podmpi-bench:", err)
	os.Exit(1)
}

type options struct {
	binDir, outDir               string
	scale, shellScale, footprint string
	scaleNs, shellNs, footNs     []int
	reps                         float64
	only                         string
	timeout                      time.Duration
}

// want reports whether section s runs.
func (o options) want(s string) bool {
	if o.only == "" {
		return true
	}
	for _, x := range strings.Split(o.only, ",") {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// rounds scales a repetition count by --reps, at least min.
func (o options) rounds(n, min int) int {
	return max(min, int(float64(n)*o.reps+0.5))
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 4000 {
			return nil, fmt.Errorf("%q is not a worker count between 1 and 4000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// timerMain is `podmpi-bench timer SPEC.json`: it runs inside a pod and
// prints the results as JSON on stdout.
func timerMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: podmpi-bench timer SPEC.json")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "timer:", err)
		return 1
	}
	var spec bench.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		fmt.Fprintf(os.Stderr, "timer: parse %s: %v\n", args[0], err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "timer:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "timer:", err)
		return 1
	}
	return 0
}
