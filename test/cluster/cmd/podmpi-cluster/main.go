// Command podmpi-cluster starts and stops the single-node Kubernetes that
// make cluster-up, cluster-down and cluster-test use (see docs/cluster.md).
//
//	podmpi-cluster up [--trainer V] [--mpi-operator V] [--no-images]
//	podmpi-cluster down
//	podmpi-cluster status
//	podmpi-cluster build [--all]            build (or find cached) every pinned binary
//	podmpi-cluster controllers [--trainer V] [--mpi-operator V]
//	podmpi-cluster import-image REF         copy a podman image into the cluster's containerd
//	podmpi-cluster restart DAEMON           stop and start one daemon of the core plane (kubelet, coredns, ...)
//	podmpi-cluster run -- CMD [ARGS...]     up (if not running), CMD (with KUBECONFIG and PODMPI_CLUSTER_REGISTRY=<host:port>), then down if it brought the cluster up
//	podmpi-cluster traces                   what of the cluster is on this machine (empty after down)
//
// up prints the kubectl and the helm it built, and ends with
// REGISTRY=<host:port> (the cluster's registry, plain http, where the podmpi
// images are) and KUBECONFIG=<path> as its last two lines. Environment: TRAINER_VERSION and MPI_OPERATOR_VERSION set the
// defaults of --trainer and --mpi-operator; PODMPI_CLUSTER_CACHE moves the
// cache of built binaries (default /var/cache/podmpi/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/test/cluster"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: podmpi-cluster up|down|status|build|controllers|import-image|restart|run|traces (see docs/cluster.md)")
	return 64
}

func run(args []string) int {
	if len(args) == 0 {
		return usage()
	}
	if args[0] == "nsexec" {
		return nsexec(args[1:])
	}
	repo, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podmpi-cluster:", err)
		return 1
	}
	c, err := cluster.New(repo, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "podmpi-cluster:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	trainer := fs.String("trainer", os.Getenv("TRAINER_VERSION"), "Trainer version (default: the first pinned; none: do not install)")
	mpiop := fs.String("mpi-operator", os.Getenv("MPI_OPERATOR_VERSION"), "mpi-operator version (default: the first pinned; none: do not install)")
	noImages := fs.Bool("no-images", false, "do not build or push the podmpi images (nor install the runtimes)")
	all := fs.Bool("all", false, "build: every pinned version, not only the defaults")
	pid := fs.Int("pid", 0, "reap: the PID to watch")
	behind := fs.Bool("build-behind", false, "run: while the command runs, build every pinned version not built yet, at the lowest CPU priority")
	if err := fs.Parse(args[1:]); err != nil {
		return 64
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "podmpi-cluster "+args[0]+":", err)
		return 1
	}
	switch args[0] {
	case "up":
		info, err := c.Up(ctx, cluster.UpOptions{Trainer: *trainer, MPIOperator: *mpiop, NoImages: *noImages})
		if err != nil {
			return fail(err)
		}
		printInfo(info)
		return 0
	case "down":
		start := time.Now()
		if err := c.Down(context.WithoutCancel(ctx)); err != nil {
			return fail(err)
		}
		if t := c.L.Traces(); len(t) > 0 {
			return fail(fmt.Errorf("left after down:\n  %s", strings.Join(t, "\n  ")))
		}
		fmt.Fprintf(os.Stderr, "== cluster down in %s; nothing of it left (processes, mounts, netns, links, rules, cgroups, state)\n", time.Since(start).Round(100*time.Millisecond))
		return 0
	case "status":
		info, err := cluster.ReadInfo(c.L)
		if err != nil {
			fmt.Println("no cluster (", err, ")")
			return 3
		}
		printInfo(info)
		return 0
	case "traces":
		for _, t := range c.L.Traces() {
			fmt.Println(t)
		}
		return 0
	case "build":
		return buildAll(ctx, c, *all, fail)
	case "controllers":
		if *trainer != "none" {
			v := *trainer
			if v == "" {
				v = c.Pins.Trainer[0]
			}
			if err := c.EnsureTrainer(ctx, v); err != nil {
				return fail(err)
			}
		}
		if *mpiop != "none" {
			v := *mpiop
			if v == "" {
				v = c.Pins.MPIOperator[0]
			}
			if err := c.EnsureMPIOperator(ctx, v); err != nil {
				return fail(err)
			}
		}
		return 0
	case "import-image":
		if fs.NArg() != 1 {
			return usage()
		}
		if err := c.ImportImage(ctx, fs.Arg(0)); err != nil {
			return fail(err)
		}
		return 0
	case "restart":
		if fs.NArg() != 1 {
			return usage()
		}
		start := time.Now()
		if err := c.RestartDaemon(ctx, fs.Arg(0)); err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "== %s restarted and healthy in %s\n", fs.Arg(0), time.Since(start).Round(100*time.Millisecond))
		return 0
	case "run":
		return runWith(ctx, c, cluster.UpOptions{Trainer: *trainer, MPIOperator: *mpiop, NoImages: *noImages}, *behind, fs.Args(), fail)
	case "reap":
		return reap(c, *pid)
	}
	return usage()
}

func printInfo(info cluster.Info) {
	fmt.Printf("kubernetes %s, coredns %s, trainer %s, jobset %s, mpi-operator %s, kueue %s, kube-router %s\n", info.Kubernetes, info.CoreDNS,
		orNone(info.Trainer), orNone(info.JobSet), orNone(info.MPIOperator), orNone(info.Kueue), orNone(info.KubeRouter))
	var deb []string
	for _, k := range []string{"etcd", "containerd", "runc", "cni-plugins", "podman", "docker-compose"} {
		deb = append(deb, k+" "+info.Debian[k])
	}
	fmt.Printf("debian: %s\n", strings.Join(deb, ", "))
	if len(info.Images) > 0 {
		var refs []string
		for _, name := range cluster.ReleaseImages() {
			refs = append(refs, info.Images[name])
		}
		fmt.Printf("images: %s\n", strings.Join(refs, " "))
	}
	fmt.Printf("up in %.1f s\n", info.UpSeconds)
	fmt.Printf("kubectl: %s\n", info.Kubectl)
	fmt.Printf("helm: %s\n", info.Helm)
	// The registry the images are in, second to last: scripts take the
	// last two lines (make release REGISTRY=$REGISTRY/podmpi).
	fmt.Printf("REGISTRY=%s\n", info.Registry)
	fmt.Printf("KUBECONFIG=%s\n", info.Kubeconfig)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func buildAll(ctx context.Context, c *cluster.Cluster, all bool, fail func(error) int) int {
	if err := c.BuildAll(ctx, all); err != nil {
		return fail(err)
	}
	return 0
}

// runWith brings the cluster up (unless it runs), runs argv, and takes the
// cluster down again if it was this command that brought it up: also when
// interrupted, and, through a reaper process in a session of its own, when
// this process is killed outright.
//
// With behind, every pinned version not built yet (the older Trainer and
// mpi-operator releases) builds while argv runs, niced: on a fresh machine
// the tests of the default versions need only the CPU their MPI jobs use,
// and the rest of it builds what the later tests need. A test that reaches
// an older version first (podmpi-cluster controllers) waits for that build
// (a lock per part) instead of starting its own. The build is stopped and
// reaped when argv ends.
func runWith(ctx context.Context, c *cluster.Cluster, opts cluster.UpOptions, behind bool, argv []string, fail func(error) int) int {
	if len(argv) == 0 {
		return usage()
	}
	_, err := cluster.ReadInfo(c.L)
	ours := err != nil
	if ours {
		self, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		reaper := exec.Command(self, "reap", "--pid", strconv.Itoa(os.Getpid()))
		reaper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		reaper.Dir, _ = os.Getwd()
		if err := reaper.Start(); err != nil {
			return fail(err)
		}
		defer func() {
			_ = reaper.Process.Signal(syscall.SIGTERM)
			_, _ = reaper.Process.Wait()
		}()
	}
	down := func() int {
		if !ours {
			return 0
		}
		if err := c.Down(context.Background()); err != nil {
			return fail(err)
		}
		if t := c.L.Traces(); len(t) > 0 {
			return fail(fmt.Errorf("left after down:\n  %s", strings.Join(t, "\n  ")))
		}
		fmt.Fprintln(os.Stderr, "== cluster down; nothing of it left")
		return 0
	}
	opts.BuildBehind = behind
	info, err := c.Up(ctx, opts)
	if err != nil {
		code := fail(err)
		down()
		return code
	}
	printInfo(info)
	stopBehind := func() error { return nil }
	if behind {
		stopBehind = buildBehind(ctx, c)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG="+info.Kubeconfig, "PODMPI_CLUSTER_TEST=1", "PODMPI_CLUSTER_REGISTRY="+info.Registry)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		} else {
			code = fail(err)
		}
	}
	if err := stopBehind(); err != nil && code == 0 {
		code = fail(fmt.Errorf("the build behind the command: %w", err))
	}
	if d := down(); d != 0 && code == 0 {
		code = d
	}
	return code
}

// buildBehind starts building every pinned version, niced, and returns the
// function that stops that build (killing what still runs of it), waits
// for it, and returns its error: nil when it finished or was stopped.
func buildBehind(ctx context.Context, c *cluster.Cluster) func() error {
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	c.B.Nice = true
	start := time.Now()
	fmt.Fprintln(os.Stderr, "== building the other pinned versions behind the command (nice 19)")
	go func() {
		err := c.BuildAll(bctx, true)
		if err == nil {
			fmt.Fprintf(os.Stderr, "== every pinned version built, %s after the command started\n", time.Since(start).Round(time.Second))
		}
		done <- err
	}()
	return func() error {
		defer cancel()
		select {
		case err := <-done: // it ended on its own
			return err
		default: // the command ended first: stop it, not a failure
			cancel()
			<-done
			return nil
		}
	}
}

// reap waits until pid has gone, then takes the cluster down unless pid
// finished its job (SIGTERM to the reaper). It runs in a session of its own
// so that killing the group of `podmpi-cluster run` does not kill it.
func reap(c *cluster.Cluster, pid int) int {
	if pid <= 1 {
		return usage()
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	first, _ := os.ReadFile(stat)
	for {
		select {
		case <-term:
			return 0
		case <-time.After(500 * time.Millisecond):
		}
		b, err := os.ReadFile(stat)
		if err != nil || !sameProcess(first, b) {
			break
		}
	}
	if err := c.Down(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "podmpi-cluster reap:", err)
		return 1
	}
	return 0
}

// sameProcess compares the start time field of two /proc/<pid>/stat reads
// and whether the process became a zombie.
func sameProcess(a, b []byte) bool {
	fa, fb := afterComm(a), afterComm(b)
	if len(fa) < 20 || len(fb) < 20 {
		return false
	}
	return fa[19] == fb[19] && fb[0] != "Z"
}

func afterComm(st []byte) []string {
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// nsexec runs in a fresh mount namespace (the parent asked for it with
// CLONE_NEWNS, and Go made the mounts private): it makes the bind mounts,
// then execs the daemon, which keeps this PID.
func nsexec(args []string) int {
	var binds [][2]string
	for len(args) > 0 && args[0] != "--" {
		if args[0] != "--bind" || len(args) < 2 {
			fmt.Fprintln(os.Stderr, "nsexec: usage: nsexec --bind SRC=DST ... -- CMD ARGS")
			return 64
		}
		src, dst, ok := strings.Cut(args[1], "=")
		if !ok {
			fmt.Fprintln(os.Stderr, "nsexec: --bind wants SRC=DST")
			return 64
		}
		binds = append(binds, [2]string{src, dst})
		args = args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "nsexec: no command")
		return 64
	}
	for _, b := range binds {
		// A folder is mounted on a folder (made if missing), a file on a
		// file that must be there (/etc/hosts).
		if fi, err := os.Stat(b[0]); err == nil && !fi.IsDir() {
			if _, err := os.Stat(b[1]); err != nil {
				fmt.Fprintln(os.Stderr, "nsexec:", err)
				return 1
			}
		} else if err := os.MkdirAll(b[1], 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "nsexec:", err)
			return 1
		}
		if err := syscall.Mount(b[0], b[1], "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			fmt.Fprintf(os.Stderr, "nsexec: bind %s on %s: %v\n", b[0], b[1], err)
			return 1
		}
	}
	cmd := args[1:]
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nsexec:", err)
		return 127
	}
	err = syscall.Exec(path, cmd, os.Environ())
	fmt.Fprintln(os.Stderr, "nsexec: exec:", err)
	return 126
}

// repoRoot finds the podmpi checkout: PODMPI_REPO, else the folder above
// test/cluster from the working directory upwards.
func repoRoot() (string, error) {
	if r := os.Getenv("PODMPI_REPO"); r != "" {
		return r, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "test", "cluster", "versions.txt")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", errors.New("run from the podmpi checkout (or set PODMPI_REPO)")
		}
	}
}
