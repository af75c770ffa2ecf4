package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"github.com/podmpi/podmpi/test/bench"
	"github.com/podmpi/podmpi/test/e2e"
	"github.com/podmpi/podmpi/test/harness"
)

// The identity everything in the pods runs as, and the ports.
const (
	uid, gid  = 2000, 2000
	user      = "mpiuser"
	agentPort = 2222
	sshdPort  = 2223
	webPort   = 9022
)

// env is the scratch directory and what lives in it.
type env struct {
	work     string // 0755, removed at the end
	launcher string // copies of the binaries, readable by uid
	agent    string
	bin      string // their directory, laid out as make build's bin/ (names linked to the launcher)
	self     string // this binary, for the in-pod timer
	auth     string // Trainer layout: id_rsa, id_rsa.pub, authorized_keys
	key      string // auth/id_rsa, also OpenSSH's identity and sshd's host key
	home     string
	tmp      string
	sshdConf string
	passwd   string // pod /etc/passwd and /etc/group contents
	group    string
	progs    map[string]string // allreduce-ompi, allreduce-mpich
	seq      int
}

// newEnv prepares the scratch directory.
func newEnv(ctx context.Context, binDir string) (*env, error) {
	work, err := os.MkdirTemp("", "podmpi-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{work: work, progs: map[string]string{}}
	if err := os.Chmod(work, 0o755); err != nil {
		return e, err
	}
	mk := func(name string, owned bool) (string, error) {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", err
		}
		if owned {
			return p, os.Chown(p, uid, gid)
		}
		return p, nil
	}
	bin, err := mk("bin", false)
	if err != nil {
		return e, err
	}
	libexec, err := mk("libexec", false)
	if err != nil {
		return e, err
	}
	// The real worker-agent, as make build lays it out (bin/worker-agent
	// is a link to the launcher, which checks the image and runs it).
	e.launcher, e.agent, e.self = filepath.Join(bin, "launcher"), filepath.Join(libexec, "worker-agent"), filepath.Join(bin, "podmpi-bench")
	self, err := os.Executable()
	if err != nil {
		return e, fmt.Errorf("locate this binary: %w", err)
	}
	for _, c := range []struct{ src, dst string }{
		{filepath.Join(binDir, "launcher"), e.launcher},
		{filepath.Join(binDir, "podmpi-rsh"), filepath.Join(bin, "podmpi-rsh")},
		{filepath.Join(binDir, "..", "libexec", "worker-agent"), e.agent},
		{self, e.self},
	} {
		if err := copyFile(c.src, c.dst, 0o755); err != nil {
			return e, fmt.Errorf("copy %s (run make build first): %w", c.src, err)
		}
	}
	e.bin = bin
	if err := e2e.LinkNames(ctx, bin); err != nil {
		return e, err
	}
	if e.home, err = mk("home", true); err != nil {
		return e, err
	}
	if e.tmp, err = mk("tmp", true); err != nil {
		return e, err
	}
	if e.auth, err = mk("auth", true); err != nil {
		return e, err
	}
	// The job key in the shape Trainer v2 generates (ECDSA P-521, SEC1 PEM):
	// identity of every client and host key of every server, podmpi and
	// OpenSSH alike, so both pay for the same signatures.
	k, err := sshtest.GenerateJobKey()
	if err != nil {
		return e, err
	}
	if err := sshtest.WriteSecret(e.auth, k, k.Public()); err != nil {
		return e, err
	}
	// OpenSSH reads a key only when its owner is the user and nobody else
	// may read it: the bench user owns the Secret, id_rsa 0600.
	e.key = filepath.Join(e.auth, "id_rsa")
	for _, name := range []string{"id_rsa", "id_rsa.pub", "authorized_keys"} {
		if err := os.Chown(filepath.Join(e.auth, name), uid, gid); err != nil {
			return e, err
		}
	}
	if err := os.Chmod(e.key, 0o600); err != nil {
		return e, err
	}
	e.sshdConf = filepath.Join(work, "sshd_config")
	conf := fmt.Sprintf(`# non-root sshd on a high port, as the upstream MPI images run it
Port %d
ListenAddress 0.0.0.0
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AcceptEnv LANG LC_* OMPI_* PMIX_*
LogLevel ERROR
# The scale simulation serves every worker from this one sshd, where a real
# cluster has one per pod: mpirun opening 64 connections at once must not
# meet the default 10:30:100 random early drop.
MaxStartups 1024
`, sshdPort, e.key, filepath.Join(e.auth, "authorized_keys"))
	if err := os.WriteFile(e.sshdConf, []byte(conf), 0o644); err != nil {
		return e, err
	}
	// The pods' own passwd and group: the host's, plus mpiuser (uid 2000).
	for _, f := range []struct {
		dst  *string
		path string
		line string
	}{
		{&e.passwd, "/etc/passwd", fmt.Sprintf("%s:x:%d:%d:podmpi bench:%s:/bin/sh", user, uid, gid, e.home)},
		{&e.group, "/etc/group", fmt.Sprintf("%s:x:%d:", user, gid)},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return e, err
		}
		var keep []string
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			fs := strings.Split(l, ":")
			if len(fs) > 2 && (fs[0] == user || fs[2] == strconv.Itoa(uid)) {
				continue
			}
			keep = append(keep, l)
		}
		*f.dst = strings.Join(append(keep, f.line), "\n") + "\n"
	}
	// The MPI program of the allreduce figures.
	root, err := e2e.ModuleRoot()
	if err != nil {
		return e, err
	}
	src := filepath.Join(root, "test/e2e/testdata/allreduce.c")
	progs, err := mk("progs", false)
	if err != nil {
		return e, err
	}
	for _, c := range []struct{ name, cc string }{{"allreduce-ompi", "mpicc.openmpi"}, {"allreduce-mpich", "mpicc.mpich"}} {
		out := filepath.Join(progs, c.name)
		if b, err := exec.CommandContext(ctx, c.cc, "-O2", "-o", out, src).CombinedOutput(); err != nil {
			return e, fmt.Errorf("%s %s: %w\n%s", c.cc, src, err, b)
		}
		e.progs[c.name] = out
	}
	return e, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// baseEnv is the environment of everything run as uid in a pod.
func (e *env) baseEnv() []string {
	return []string{"HOME=" + e.home, "USER=" + user, "LOGNAME=" + user, "SHELL=/bin/sh", "TMPDIR=" + e.tmp,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C.UTF-8"}
}

// etcFiles are the per-pod /etc files.
func (e *env) etcFiles() map[string]string {
	return map[string]string{"passwd": e.passwd, "group": e.group}
}

// sshArgs are the OpenSSH client options every baseline uses: what the
// upstream MPI images and mpi-operator pass, default algorithms.
func (e *env) sshArgs(port int) []string {
	return []string{"-p", strconv.Itoa(port), "-i", e.key, "-l", user,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
}

// ssh is an OpenSSH command line to host:port running remote.
func (e *env) ssh(port int, host string, remote ...string) []string {
	return append(append(append([]string{"/usr/bin/ssh"}, e.sshArgs(port)...), host), remote...)
}

// controlMaster starts OpenSSH's connection sharing in pod 0, as a user's
// ssh_config with ControlMaster and ControlPersist gives it: one master
// connection to host:port held open (here in the foreground, -N, so that the
// harness owns its PID and stops it), whose socket clients pass with -S. It
// returns the socket and the master; the master is up when the socket
// answers `ssh -O check`.
func (e *env) controlMaster(ctx context.Context, c *harness.Cluster, port int, host string) (string, *harness.Proc, error) {
	e.seq++
	sock := filepath.Join(e.tmp, fmt.Sprintf("cm-%d.sock", e.seq))
	args := append(append([]string{"-M", "-N", "-S", sock, "-o", "ControlPersist=no"}, e.sshArgs(port)...), host)
	p, err := c.Start(ctx, 0, uid, gid, e.baseEnv(), "", "/usr/bin/ssh", args...)
	if err != nil {
		return "", nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := e.checkMaster(ctx, c, sock, host); err == nil {
			return sock, p, nil
		}
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			return "", nil, fmt.Errorf("the OpenSSH control master to %s:%d exited: %v: %s", host, port, p.Wait(), tailStr(string(b), 1500))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Stop()
			return "", nil, fmt.Errorf("the OpenSSH control master to %s:%d did not answer on %s within 30 s; see %s", host, port, sock, p.Log)
		}
	}
}

// checkMaster asks the control master on sock whether it runs.
func (e *env) checkMaster(ctx context.Context, c *harness.Cluster, sock, host string) error {
	_, stderr, code, err := c.Run(ctx, 0, uid, gid, e.baseEnv(), "/usr/bin/ssh", "-S", sock, "-O", "check", host)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("ssh -O check: exit %d: %s", code, strings.TrimSpace(stderr))
	}
	return nil
}

// sshShared is an OpenSSH command line that runs remote on the connection
// of the control master on sock (ControlMaster=no: a client, never a new
// master).
func (e *env) sshShared(sock string, port int, host string, remote ...string) []string {
	args := append([]string{"/usr/bin/ssh", "-S", sock, "-o", "ControlMaster=no"}, e.sshArgs(port)...)
	return append(append(args, host), remote...)
}

// rsh is a launcher rsh command line (job key from the auth dir).
func (e *env) rsh(host string, remote ...string) ([]string, []string) {
	return append([]string{e.launcher, "rsh", "-p", strconv.Itoa(agentPort), host}, remote...),
		[]string{"PODMPI_SSH_AUTH_DIR=" + e.auth}
}

// relay is a podmpi-rsh command line (the relay binary make build installs):
// with socket, it has that launcher run the command on its shared
// connection; with socket "", it runs the launcher's full client.
func (e *env) relay(socket, host string, remote ...string) ([]string, []string) {
	return append([]string{filepath.Join(e.bin, "podmpi-rsh"), "-p", strconv.Itoa(agentPort), host}, remote...),
		[]string{"PODMPI_SSH_AUTH_DIR=" + e.auth, "PODMPI_RSH_SOCKET=" + socket}
}

// sharingLauncher starts a launcher in pod 0 that probes hosts, keeps the
// connections and serves them on its socket, running `sleep` as its
// command; it returns the socket (for relay) and a stop that ends it.
func (e *env) sharingLauncher(ctx context.Context, c *harness.Cluster, hosts []string) (string, func(), error) {
	e.seq++
	out := filepath.Join(e.tmp, fmt.Sprintf("socket-%d", e.seq))
	argv := e.launcherArgs([]string{"--workers", strings.Join(hosts, ","), "--slots", "1", "--mpi.implementation", "openmpi4"},
		"/bin/sh", "-c", `echo "$PODMPI_RSH_SOCKET" > `+out+`; exec sleep 3600`)
	p, err := c.Start(ctx, 0, uid, gid, e.baseEnv(), "", argv[0], argv[1:]...)
	if err != nil {
		return "", nil, err
	}
	stop := func() { _ = p.Stop() }
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(out); err == nil && strings.HasSuffix(string(b), "\n") {
			sock := strings.TrimSpace(string(b))
			if sock == "" {
				stop()
				return "", nil, fmt.Errorf("the launcher does not share its connections (PODMPI_RSH_SOCKET empty); see %s", p.Log)
			}
			return sock, stop, nil
		}
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			return "", nil, fmt.Errorf("the sharing launcher exited: %s", tailStr(string(b), 1500))
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	return "", nil, fmt.Errorf("the sharing launcher did not start mpirun's command within 30s; see %s", p.Log)
}

// launcherArgs is a launcher command line with the flags every run gets.
func (e *env) launcherArgs(flags []string, command ...string) []string {
	e.seq++
	run := filepath.Join(e.tmp, "launcher-"+strconv.Itoa(e.seq))
	argv := []string{e.launcher, "--ssh.auth-dir", e.auth,
		"--hostfile.output", filepath.Join(run, "hostfile"),
		"--termination-log", filepath.Join(run, "termination-log"),
		"--web.listen-address", "", "--log.format", "json"}
	argv = append(argv, flags...)
	return append(append(argv, "--"), command...)
}

// shimEnv is the environment of podmpi's plain mpirun (the SDK's way to
// start MPI): bin/ first on PATH, and the launcher flags launcherArgs
// passes as their PODMPI_* twins, since that command has no room for flags.
func (e *env) shimEnv() []string {
	e.seq++
	run := filepath.Join(e.tmp, "launcher-"+strconv.Itoa(e.seq))
	return []string{"PATH=" + e.bin + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "PODMPI_SSH_AUTH_DIR=" + e.auth,
		"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"), "PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
		"PODMPI_WEB_LISTEN_ADDRESS=", "PODMPI_LOG_FORMAT=json"}
}

// timer runs spec in pod as uid and returns the results; a command that
// failed is an error naming it.
func (e *env) timer(ctx context.Context, c *harness.Cluster, pod int, spec bench.Spec) ([]bench.Result, error) {
	e.seq++
	path := filepath.Join(e.work, fmt.Sprintf("spec-%d.json", e.seq))
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	stdout, stderr, code, err := c.Run(ctx, pod, uid, gid, e.baseEnv(), e.self, "timer", path)
	if err != nil || code != 0 {
		return nil, fmt.Errorf("timer in pod %d: exit %d, %v: %s", pod, code, err, tailStr(stderr, 2000))
	}
	var res []bench.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		return nil, fmt.Errorf("timer output: %w: %s", err, tailStr(stdout, 500))
	}
	var errs []string
	for _, r := range res {
		if r.Err != "" {
			errs = append(errs, fmt.Sprintf("%s: %s", r.Name, tailStr(r.Err, 1500)))
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("in pod %d: %s", pod, strings.Join(errs, "\n"))
	}
	return res, nil
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// waitBanner waits until addr, dialled from pod, sends an SSH banner.
func waitBanner(ctx context.Context, c *harness.Cluster, pod int, addr string, p *harness.Proc) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last error
	for {
		conn, err := e2e.DialInPod(ctx, c, pod, addr)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if rerr == nil && strings.HasPrefix(line, "SSH-2.0-") {
				return nil
			}
			err = fmt.Errorf("banner %q: %v", line, rerr)
		}
		last = err
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.Log)
			return fmt.Errorf("server for %s exited (%v); log:\n%s", addr, p.Wait(), tailStr(string(b), 2000))
		case <-ctx.Done():
			return fmt.Errorf("no SSH banner from %s: %v", addr, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serverOpts change what startServers starts.
type serverOpts struct {
	agentArgs []string // extra worker-agent flags
	path      string   // PATH of both servers' sessions; "" keeps the default
}

// startServers starts worker-agent (port 2222, web 9022) and sshd (2223) in
// pod, as uid, and waits for both banners from pod from.
func (e *env) startServers(ctx context.Context, c *harness.Cluster, pod, from, slots int, dialIP string, so serverOpts) (agent, sshd *harness.Proc, err error) {
	args := []string{"--ssh.listen-address", ":" + strconv.Itoa(agentPort), "--ssh.auth-dir", e.auth,
		"--web.listen-address", ":" + strconv.Itoa(webPort), "--slots", strconv.Itoa(slots),
		"--gpu.detect", "none", "--log.format", "json", "--log.level", "warn"}
	env, conf := e.baseEnv(), e.sshdConf
	if so.path != "" {
		env = append(env, "PATH="+so.path)
		conf = filepath.Join(e.work, fmt.Sprintf("sshd_config-pod%d", pod))
		b, err := os.ReadFile(e.sshdConf)
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(conf, append(b, []byte("SetEnv PATH="+so.path+"\n")...), 0o644); err != nil {
			return nil, nil, err
		}
	}
	agent, err = c.Start(ctx, pod, uid, gid, env, "", e.agent, append(args, so.agentArgs...)...)
	if err != nil {
		return nil, nil, err
	}
	sshd, err = c.Start(ctx, pod, uid, gid, e.baseEnv(), "", "/usr/sbin/sshd", "-D", "-e", "-f", conf)
	if err != nil {
		return agent, nil, err
	}
	if dialIP == "" {
		dialIP = c.Pod(pod).IP.String()
	}
	for _, s := range []struct {
		port int
		p    *harness.Proc
	}{{agentPort, agent}, {sshdPort, sshd}} {
		if err := waitBanner(ctx, c, from, net.JoinHostPort(dialIP, strconv.Itoa(s.port)), s.p); err != nil {
			return agent, sshd, err
		}
	}
	return agent, sshd, nil
}
