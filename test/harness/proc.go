package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultGrace is how long [Proc.Stop] and context cancellation wait between
// SIGTERM and SIGKILL.
const DefaultGrace = 2 * time.Second

// DefaultPath is the PATH given to a command whose env has none.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Command returns a command that runs name with args inside pod: its network
// namespace and /etc files (`ip netns exec`), its UTS namespace (`nsenter --uts`),
// as uid:gid with no supplementary groups and no inheritable capabilities
// (`setpriv`; uid < 0 keeps root), with exactly env as environment (`env -i`;
// DefaultPath is added when env has no PATH).
//
// The command runs in its own process group. When ctx is done or the cluster is
// closed, the group gets SIGTERM and, DefaultGrace later, SIGKILL; the process
// also gets SIGKILL if the test process dies. Close additionally kills whatever
// is left in the pod's namespace by PID. Bad arguments (pod out of range, a
// closed cluster, an env entry without '=') make Start return an error.
func (c *Cluster) Command(ctx context.Context, pod, uid, gid int, env []string, name string, args ...string) *exec.Cmd {
	argv, err := c.commandArgv(pod, uid, gid, env, name, args)
	if err == nil && c.ctx.Err() != nil {
		err = fmt.Errorf("harness: cluster %s is closed", c.id)
	}
	if err != nil {
		cmd := exec.Command("/nonexistent-harness-command")
		cmd.Err = err
		return cmd
	}
	// The command dies with ctx or with the cluster, whichever ends first.
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	context.AfterFunc(cctx, func() { stop() })

	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Env = []string{DefaultPath}
	// A pod's process starts in its image's working directory, not in the
	// test's: a checkout under a private directory (mktemp -d is 0700)
	// would refuse the pod's UID, and Hydra hands its cwd to every proxy.
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		pid := cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		time.AfterFunc(DefaultGrace, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		return nil
	}
	cmd.WaitDelay = DefaultGrace + time.Second
	return cmd
}

// commandArgv builds the argv of [Cluster.Command].
func (c *Cluster) commandArgv(pod, uid, gid int, env []string, name string, args []string) ([]string, error) {
	if err := c.checkPod(pod); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("harness: empty command name")
	}
	if strings.Contains(name, "=") {
		return nil, fmt.Errorf("harness: command name %q contains '=', which env(1) would take for a variable", name)
	}
	hasPath := false
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("harness: env entry %q is not KEY=VALUE", e)
		}
		if k == "PATH" {
			hasPath = true
		}
	}
	p := c.pods[pod]
	argv := []string{c.tools.ip, "netns", "exec", p.NetNS, c.tools.nsenter, "--uts=" + p.UTSFile, "--"}
	if uid >= 0 {
		if gid < 0 {
			gid = 0
		}
		argv = append(argv, c.tools.setpriv,
			"--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid),
			"--clear-groups", "--inh-caps=-all", "--pdeathsig=keep", "--")
	}
	argv = append(argv, "/usr/bin/env", "-i", "--")
	argv = append(argv, env...)
	if !hasPath {
		argv = append(argv, DefaultPath)
	}
	argv = append(argv, name)
	return append(argv, args...), nil
}

// Run runs a command in pod (see [Cluster.Command]) and returns its output and
// exit code. err is nil when the command ran to an exit, whatever its code; it
// is non-nil when it could not start, was killed by a signal, or ctx ended.
func (c *Cluster) Run(ctx context.Context, pod, uid, gid int, env []string, name string, args ...string) (stdout, stderr string, exitCode int, err error) {
	cmd := c.Command(ctx, pod, uid, gid, env, name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	stdout, stderr = o.String(), e.String()
	if err == nil {
		return stdout, stderr, 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			cause := ""
			if ctx.Err() != nil {
				cause = " (" + ctx.Err().Error() + ")"
			}
			return stdout, stderr, -1, fmt.Errorf("harness: %s in pod %d killed by %v%s", name, pod, ws.Signal(), cause)
		}
		if ctx.Err() != nil {
			return stdout, stderr, ee.ExitCode(), fmt.Errorf("harness: %s in pod %d: %w", name, pod, ctx.Err())
		}
		return stdout, stderr, ee.ExitCode(), nil
	}
	return stdout, stderr, -1, fmt.Errorf("harness: run %s in pod %d: %w", name, pod, err)
}

// Proc is a background process started by [Cluster.Start].
type Proc struct {
	Cmd *exec.Cmd
	Pod int
	Log string // path of the log file holding stdout and stderr

	c    *Cluster
	done chan struct{}
	err  error
}

// Start starts a background process in pod (see [Cluster.Command]) with stdout
// and stderr appended to logfile (relative names are under [Cluster.LogDir];
// "" picks "<host>-<name>-<n>.log"). The process is reaped by the harness; it is
// stopped when ctx ends, by [Proc.Stop], or by Close.
func (c *Cluster) Start(ctx context.Context, pod, uid, gid int, env []string, logfile, name string, args ...string) (*Proc, error) {
	if err := c.checkPod(pod); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.logSeq++
	seq := c.logSeq
	c.mu.Unlock()
	if logfile == "" {
		logfile = fmt.Sprintf("%s-%s-%d.log", c.pods[pod].Hostname, filepath.Base(name), seq)
	}
	if !filepath.IsAbs(logfile) {
		logfile = filepath.Join(c.logDir, logfile)
	}
	f, err := os.OpenFile(logfile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: open log for %s in pod %d: %w", name, pod, err)
	}
	defer f.Close()
	cmd := c.Command(ctx, pod, uid, gid, env, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	p := &Proc{Cmd: cmd, Pod: pod, Log: logfile, c: c, done: make(chan struct{})}
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("harness: cluster %s is closed", c.id)
	}
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("harness: start %s in pod %d: %w", name, pod, err)
	}
	c.procs[p] = struct{}{}
	c.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		c.mu.Lock()
		delete(c.procs, p)
		c.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id (the same through ip, nsenter, setpriv and env, which
// all exec).
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns exec's Wait error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// WaitContext is Wait bounded by ctx.
func (p *Proc) WaitContext(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("harness: wait for pid %d in pod %d: %w", p.PID(), p.Pod, ctx.Err())
	}
}

// ExitCode is the exit code, or -1 while running or when killed by a signal.
func (p *Proc) ExitCode() int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Signal sends sig to the process's process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("harness: pid %d in pod %d already exited", p.PID(), p.Pod)
	default:
	}
	if err := syscall.Kill(-p.PID(), sig); err != nil {
		return fmt.Errorf("harness: signal %v to process group %d in pod %d: %w", sig, p.PID(), p.Pod, err)
	}
	return nil
}

// Stop sends SIGTERM to the process group, SIGKILL after DefaultGrace, and waits
// for the process to be reaped (bounded to DefaultGrace + 1 s). It returns nil
// once the process is gone, whatever its exit status.
func (p *Proc) Stop() error {
	return p.StopGrace(DefaultGrace)
}

// StopGrace is Stop with another grace period.
func (p *Proc) StopGrace(grace time.Duration) error {
	if err := stopChild(p.PID(), p.done, grace); err != nil {
		return fmt.Errorf("harness: stop pid %d in pod %d: %w", p.PID(), p.Pod, err)
	}
	return nil
}

// PIDs lists the processes in pod's network namespace (what `ip netns pids`
// prints), found by comparing /proc/<pid>/ns/net with the namespace file.
func (c *Cluster) PIDs(pod int) []int {
	if c.checkPod(pod) != nil {
		return nil
	}
	return netnsPIDs(filepath.Join(netnsRun, c.pods[pod].NetNS))
}

// KillPod sends SIGKILL to every process in pod's network namespace, as when a
// node dies, and waits (up to 3 s) until none is left.
func (c *Cluster) KillPod(i int) error {
	if err := c.checkPod(i); err != nil {
		return err
	}
	left := killNetns([]string{filepath.Join(netnsRun, c.pods[i].NetNS)}, 0, 3*time.Second)
	if len(left) > 0 {
		return fmt.Errorf("harness: pod %d (%s): pids %v still alive 3 s after SIGKILL", i, c.pods[i].NetNS, left)
	}
	return nil
}

// DropTCP adds an nftables rule in pod's namespace that silently drops incoming
// TCP to port, so that connecting to it times out (no RST). The rule lives in
// table inet podmpi_harness and disappears with the namespace.
func (c *Cluster) DropTCP(pod, port int) error {
	if err := c.checkPod(pod); err != nil {
		return err
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("harness: DropTCP: port %d out of range 1-65535", port)
	}
	script := "table inet podmpi_harness {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n" +
		fmt.Sprintf("add rule inet podmpi_harness input tcp dport %d drop\n", port)
	return c.nft(pod, script)
}

// RestoreTCP removes every rule DropTCP added in pod.
func (c *Cluster) RestoreTCP(pod int) error {
	if err := c.checkPod(pod); err != nil {
		return err
	}
	script := "table inet podmpi_harness {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n" +
		"flush chain inet podmpi_harness input\n"
	return c.nft(pod, script)
}

// DropDNS silently drops pod's DNS traffic (UDP and TCP to port 53) where
// it reaches the DNS server, in the hub's namespace: what a NetworkPolicy
// whose egress rule misses the cluster's DNS server does to a pod. Lookups
// from pod time out with no answer (a drop in the pod itself would fail
// them at once with EPERM); other pods resolve as before. The rules live in
// the hub's table inet podmpi_harness, one chain per pod, and disappear
// with the namespace.
func (c *Cluster) DropDNS(pod int) error {
	if err := c.checkPod(pod); err != nil {
		return err
	}
	ip := c.pods[pod].IP
	return c.nftIn(c.hubNS, dnsChain(pod)+
		fmt.Sprintf("add rule inet podmpi_harness dns_from_pod%d ip saddr %s udp dport 53 drop\n", pod, ip)+
		fmt.Sprintf("add rule inet podmpi_harness dns_from_pod%d ip saddr %s tcp dport 53 drop\n", pod, ip))
}

// RestoreDNS removes the rules DropDNS added for pod.
func (c *Cluster) RestoreDNS(pod int) error {
	if err := c.checkPod(pod); err != nil {
		return err
	}
	return c.nftIn(c.hubNS, dnsChain(pod)+fmt.Sprintf("flush chain inet podmpi_harness dns_from_pod%d\n", pod))
}

// dnsChain declares the hub's input chain that holds DropDNS's rules for
// pod.
func dnsChain(pod int) string {
	return fmt.Sprintf("table inet podmpi_harness {\n  chain dns_from_pod%d {\n    type filter hook input priority 0; policy accept;\n  }\n}\n", pod)
}

func (c *Cluster) nft(pod int, script string) error {
	if err := c.nftIn(c.pods[pod].NetNS, script); err != nil {
		return fmt.Errorf("harness: nftables in pod %d: %w", pod, err)
	}
	return nil
}

// nftIn runs an nft script in the network namespace named ns.
func (c *Cluster) nftIn(ns, script string) error {
	nft, err := lookPath("nft")
	if err != nil {
		return fmt.Errorf("harness: %w (apt-get install -y nftables)", err)
	}
	if err := runTool(c.ctx, []byte(script), c.tools.nsenter, "--net="+filepath.Join(netnsRun, ns), "--", nft, "-f", "-"); err != nil {
		return fmt.Errorf("harness: nftables in %s: %w", ns, err)
	}
	return nil
}

// waitProcs waits (bounded by d) for every tracked Proc to be reaped.
func (c *Cluster) waitProcs(d time.Duration) {
	c.mu.Lock()
	var chans []<-chan struct{}
	for p := range c.procs {
		chans = append(chans, p.done)
	}
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}
