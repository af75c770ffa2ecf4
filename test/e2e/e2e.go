// Package e2e runs podmpi's launcher and worker-agent end to end: real
// OpenMPI, MPICH and Intel MPI jobs across network-namespace "pods" built by
// test/harness, with Kubernetes-shaped DNS, the Trainer v2 SSH key layout and
// an OpenShift-style arbitrary uid. The tests live in this package's _test
// files; the helpers here are shared with the demo (test/e2e/cmd/demo).
//
// Everything needs root. [Missing] names what this machine lacks.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/proc"
	"github.com/podmpi/podmpi/test/harness"
)

// AnyUID and AnyGID are the OpenShift restricted-v2 style identity every
// launcher and worker-agent runs as: a uid with no /etc/passwd entry, gid 0.
const (
	AnyUID = 1000680000
	AnyGID = 0
)

// Ports of the worker-agent in every worker pod.
const (
	SSHPort = 2222
	WebPort = 9022
)

// Missing reports what this machine lacks to run the end-to-end tests: root,
// the harness tools, both MPIs and their compilers. "" means nothing.
func Missing() string {
	var miss []string
	if err := harness.Preflight(); err != nil {
		miss = append(miss, err.Error())
	}
	var progs []string
	for _, p := range []string{"mpirun.openmpi", "mpicc.openmpi", "mpiexec.hydra", "mpicc.mpich"} {
		if _, err := exec.LookPath(p); err != nil {
			progs = append(progs, p)
		}
	}
	if len(progs) > 0 {
		miss = append(miss, "missing "+strings.Join(progs, ", ")+
			" (apt-get install -y openmpi-bin libopenmpi-dev mpich libmpich-dev)")
	}
	return strings.Join(miss, "; ")
}

// ModuleRoot finds the directory holding go.mod, walking up from the working
// directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for range 32 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("module root: no go.mod in the working directory or above")
}

// goTool is the go command: PATH, else the default install.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// Binaries are the binaries under test: the launcher, the real
// worker-agent, and the relay podmpi-rsh that make build installs next to
// the launcher.
type Binaries struct {
	Launcher    string
	WorkerAgent string
	Relay       string
}

// Build compiles cmd/launcher, cmd/launcher/podmpi-rsh and cmd/worker-agent
// of the module at root, bounded by ctx, laid out as make build lays them
// out: the launcher and the relay in dir, static (CGO_ENABLED=0) as make
// build makes them, and the real worker-agent in dir/../libexec (LinkNames
// links dir/worker-agent to the launcher, which runs it), with cgo unless
// static is set.
func Build(ctx context.Context, root, dir string, static bool) (Binaries, error) {
	b := Binaries{Launcher: filepath.Join(dir, "launcher"), WorkerAgent: filepath.Join(filepath.Dir(dir), "libexec", "worker-agent"),
		Relay: filepath.Join(dir, "podmpi-rsh")}
	for _, t := range []struct{ out, pkg string }{{b.WorkerAgent, "./cmd/worker-agent"}, {b.Launcher, "./cmd/launcher"}, {b.Relay, "./cmd/launcher/podmpi-rsh"}} {
		if err := os.MkdirAll(filepath.Dir(t.out), 0o755); err != nil {
			return b, err
		}
		cmd := exec.CommandContext(ctx, goTool(), "build", "-o", t.out, t.pkg)
		cmd.Dir = root
		cmd.Env = os.Environ()
		if static || t.out != b.WorkerAgent {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		}
		cmd.WaitDelay = time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build -o %s %s (in %s): %w\n%s", t.out, t.pkg, root, err, strings.TrimSpace(string(out)))
		}
	}
	return b, nil
}

// MakeDir creates a directory every pod's arbitrary uid can write (0777,
// like an emptyDir), for HOME, TMPDIR and outputs.
func MakeDir(path string) error {
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o777); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// AgentOptions configure one worker-agent.
type AgentOptions struct {
	AuthDir string
	Slots   int      // --slots; 0 means 2
	Home    string   // HOME of the agent (and its sessions)
	Env     []string // extra environment, e.g. a PATH without orted
	Args    []string // extra flags
	Log     string   // log file; "" lets the harness choose
	// Wrap, when set, is a command prefix the agent runs under, as root;
	// the wrapper must drop to [AnyUID] itself (e.g. a chroot wrapper).
	Wrap []string
}

// StartAgent starts worker-agent in pod as [AnyUID]:[AnyGID] with the
// documented flags. It does not wait for readiness (see [WaitReady]).
func StartAgent(ctx context.Context, c *harness.Cluster, pod int, bin Binaries, o AgentOptions) (*harness.Proc, error) {
	slots := o.Slots
	if slots == 0 {
		slots = 2
	}
	env := []string{"HOME=" + o.Home, "SHELL=/bin/sh"}
	env = append(env, o.Env...)
	args := []string{
		"--ssh.listen-address", ":" + strconv.Itoa(SSHPort),
		"--ssh.auth-dir", o.AuthDir,
		"--web.listen-address", ":" + strconv.Itoa(WebPort),
		"--slots", strconv.Itoa(slots),
		"--log.format", "json",
	}
	args = append(args, o.Args...)
	return startAs(ctx, c, pod, env, o.Log, o.Wrap, bin.WorkerAgent, args)
}

// inNetns runs fn on an OS thread switched into the network namespace of
// pod, then switches the thread back and hands it back to the scheduler.
// Sockets created by fn stay in the pod's namespace for their whole life,
// whichever thread uses them later.
//
// The thread must not die: children started by the harness carry
// Pdeathsig, which fires when the thread that forked them exits, and any
// thread may have forked one. Only when switching back fails is the thread
// left locked (and so terminated with the goroutine), since it must never
// run other goroutines in the pod's namespace.
func inNetns(c *harness.Cluster, pod int, fn func() error) error {
	if pod < 0 || pod >= c.NumPods() {
		return fmt.Errorf("pod %d out of range (cluster has %d)", pod, c.NumPods())
	}
	path := filepath.Join("/run/netns", c.Pod(pod).NetNS)
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns of pod %d: %w", pod, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns into %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back from %s: %w", path, err))
			return // stays locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialInPod connects to addr (an IP:port) from inside pod's network namespace.
func DialInPod(ctx context.Context, c *harness.Cluster, pod int, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(c, pod, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// ListenInPod listens on addr inside pod's network namespace.
func ListenInPod(c *harness.Cluster, pod int, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(c, pod, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// HTTPGetInPod does GET url-path on addr from inside pod and returns the
// status code and body (at most 64 KiB).
func HTTPGetInPod(ctx context.Context, c *harness.Cluster, pod int, addr, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := DialInPod(ctx, c, pod, addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body.String(), nil
}

// WaitReady polls each pod's worker-agent /readyz until it answers 200, or
// ctx ends. A dead agent process fails fast.
func WaitReady(ctx context.Context, c *harness.Cluster, agents map[int]*harness.Proc) error {
	for pod, p := range agents {
		addr := net.JoinHostPort(c.Pod(pod).IP.String(), strconv.Itoa(WebPort))
		var last string
		for {
			code, body, err := HTTPGetInPod(ctx, c, pod, addr, "/readyz")
			if err == nil && code == http.StatusOK {
				break
			}
			if err != nil {
				last = err.Error()
			} else {
				last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
			}
			select {
			case <-p.Done():
				log, _ := os.ReadFile(p.Log)
				return fmt.Errorf("worker-agent in pod %d (%s) exited (%v) before ready; log:\n%s", pod, c.Pod(pod).Hostname, p.Wait(), tailBytes(log, 3000))
			case <-ctx.Done():
				log, _ := os.ReadFile(p.Log)
				return fmt.Errorf("worker-agent in pod %d (%s) not ready on %s: %s (%w); log:\n%s", pod, c.Pod(pod).Hostname, addr, last, ctx.Err(), tailBytes(log, 3000))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// LauncherOptions configure one launcher run.
type LauncherOptions struct {
	AuthDir string
	// RunDir is a directory the launcher's uid can write: HOME, TMPDIR, the
	// hostfile and the termination log go there.
	RunDir string
	// Flags are the launcher flags (discovery etc.) besides the ones every
	// run gets (auth dir, outputs, log format).
	Flags []string
	// Command is what follows "--".
	Command []string
	// Env is extra environment.
	Env []string
	// LogFormat is --log.format; "" means text.
	LogFormat string
	// Log is the file receiving stdout and stderr.
	Log string
	// Wrap is a command prefix run as root, as in [AgentOptions].
	Wrap []string
}

// EnvShare switches the launcher's connection sharing for every launcher
// the end-to-end tests start: "off" runs them all with
// --ssh.share-connections=false (every podmpi-rsh connects on its own);
// unset or anything else keeps the default (on).
const EnvShare = "PODMPI_E2E_SHARE"

// ShareEnv is the launcher environment EnvShare asks for: the flag's twin
// when sharing is off, else nothing.
func ShareEnv() []string {
	if os.Getenv(EnvShare) == "off" {
		return []string{"PODMPI_SSH_SHARE_CONNECTIONS=false"}
	}
	return nil
}

// StartLauncher starts the launcher in pod as [AnyUID]:[AnyGID].
func StartLauncher(ctx context.Context, c *harness.Cluster, pod int, bin Binaries, o LauncherOptions) (*harness.Proc, error) {
	if err := MakeDir(o.RunDir); err != nil {
		return nil, err
	}
	format := o.LogFormat
	if format == "" {
		format = "text"
	}
	env := append([]string{"HOME=" + o.RunDir, "TMPDIR=" + o.RunDir, "SHELL=/bin/sh"}, ShareEnv()...)
	env = append(env, o.Env...)
	args := []string{
		"--ssh.auth-dir", o.AuthDir,
		"--hostfile.output", filepath.Join(o.RunDir, "hostfile"),
		"--termination-log", filepath.Join(o.RunDir, "termination-log"),
		"--log.format", format,
	}
	args = append(args, o.Flags...)
	args = append(args, "--")
	args = append(args, o.Command...)
	return startAs(ctx, c, pod, env, o.Log, o.Wrap, bin.Launcher, args)
}

// startAs starts prog as [AnyUID]:[AnyGID] in pod, or as root under wrap.
func startAs(ctx context.Context, c *harness.Cluster, pod int, env []string, log string, wrap []string, prog string, args []string) (*harness.Proc, error) {
	if len(wrap) == 0 {
		return c.Start(ctx, pod, AnyUID, AnyGID, env, log, prog, args...)
	}
	argv := append(append(append([]string{}, wrap[1:]...), prog), args...)
	return c.Start(ctx, pod, -1, -1, env, log, wrap[0], argv...)
}

// Proc is one process found in a pod.
type Proc struct {
	PID  int
	Comm string
	Cmd  string // command line, NULs as spaces, shortened
}

func (p Proc) String() string { return fmt.Sprintf("%d %s [%s]", p.PID, p.Comm, p.Cmd) }

// Procs lists the live (non-zombie) processes in pod, leaving out the PIDs in
// except.
func Procs(c *harness.Cluster, pod int, except ...int) []Proc {
	var out []Proc
	for _, pid := range c.PIDs(pod) {
		if slices.Contains(except, pid) {
			continue
		}
		st, err := proc.ReadStat(proc.DefaultRoot, pid)
		if err != nil || st.Exited() {
			continue // gone, or exited and waiting to be reaped
		}
		args, _ := proc.ReadFile(proc.DefaultRoot, pid, "cmdline", 4096)
		cl := strings.TrimSpace(strings.ReplaceAll(string(args), "\x00", " "))
		if len(cl) > 160 {
			cl = cl[:160] + "..."
		}
		out = append(out, Proc{PID: pid, Comm: st.Comm, Cmd: cl})
	}
	return out
}

// WaitNoProcs waits until every pod in pods has no live process other than
// those in keep[pod], or until d passes; it returns what is left.
func WaitNoProcs(c *harness.Cluster, pods []int, keep map[int][]int, d time.Duration) map[int][]Proc {
	deadline := time.Now().Add(d)
	for {
		left := map[int][]Proc{}
		for _, pod := range pods {
			if ps := Procs(c, pod, keep[pod]...); len(ps) > 0 {
				left[pod] = ps
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SDKCommand is the launcher command the Kubeflow Python SDK writes into a
// TrainJob for a CustomTrainer on an MPI runtime, argument for argument:
//
//	mpirun --hostfile <hostfile> bash -c '<script>'
//
// where the script reads the function's source from a here-document,
// writes it with printf to funcFile (the SDK's is /home/mpiuser/<name>.py)
// and runs entrypoint (the SDK's is python) on it. Every rank runs the
// script, so every pod writes funcFile.
func SDKCommand(hostfile, funcFile, entrypoint, code string) []string {
	script := "\nread -r -d '' SCRIPT << EOM\n\n" + code + "\nEOM\n" +
		"printf \"%s\" \"$SCRIPT\" > \"" + funcFile + "\"\n" +
		entrypoint + " \"" + funcFile + "\""
	return []string{"mpirun", "--hostfile", hostfile, "bash", "-c", script}
}

// SDKFunction is a training function as the SDK sends it: its source and
// the call, printing one "sdk-rank R of N on HOST" line per rank (Open MPI's
// rank variables; only os, so that python3-minimal runs it).
const SDKFunction = `def train():
    import os
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "?"))
    size = os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "?"))
    print(f"sdk-rank {rank} of {size} on {os.uname().nodename}", flush=True)

train()`

// TrainerLauncherEnv is what Trainer v2's MPI plugin sets in the launcher's
// container (OpenMPI runtimes): the hostfile it mounts, fully qualified
// names kept, the slots per node, and ConnectionAttempts for ssh.
func TrainerLauncherEnv(hostfile string, slotsPerNode int) []string {
	return []string{
		"OMPI_MCA_orte_default_hostfile=" + hostfile,
		"OMPI_MCA_orte_keep_fqdn_hostnames=true",
		"OMPI_MCA_orte_set_default_slots=" + strconv.Itoa(slotsPerNode),
		"OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10",
	}
}

// LinkNames lays out dir the way make build lays out bin/: next to the
// launcher and the relay podmpi-rsh in dir, every relative symlink
// `launcher names` lists ("name target": ssh to podmpi-rsh; mpirun,
// mpiexec, mpiexec.hydra and worker-agent to the launcher).
func LinkNames(ctx context.Context, dir string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "launcher"), "names").Output()
	if err != nil {
		return fmt.Errorf("%s/launcher names: %w", dir, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n, target, ok := strings.Cut(l, " ")
		if !ok {
			return fmt.Errorf("%s/launcher names: line %q is not \"name target\"", dir, l)
		}
		if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
			return fmt.Errorf("%s -> %s: %w", n, target, err)
		}
		p := filepath.Join(dir, n)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	return nil
}
