// Package rsh is the ssh-compatible client that mpirun runs as its remote
// shell: `launcher rsh` on the launcher, and `worker-agent rsh` on workers
// (Open MPI's tree spawn makes workers start daemons on other workers once
// a job has more than 64 nodes).
//
// It accepts what Open MPI 4/5 (plm_rsh_agent / plm_ssh_agent), Hydra (MPICH
// -launcher-exec, Intel MPI -bootstrap-exec) and Horovod pass to their ssh
// program (see ParseArgs), connects with sshclient (the job key from the
// auth dir, host key pinned to the job's id_rsa.pub), runs the command
// through the worker's shell, streams stdin, stdout and stderr separately,
// forwards SIGINT, SIGTERM and SIGHUP as SSH signal requests, and exits with
// the remote command's status. When it cannot run the command it exits 255,
// as ssh(1) does, after one stderr line:
//
//	podmpi-rsh: <host>:<port>: <phase>: <cause>; hint: <hint>
//
// It needs no passwd entry, no $HOME and no ~/.ssh, so it works under the
// random UID of OpenShift's restricted SCC. As ssh first on PATH (make
// build lays out bin/ so), it is the ssh of horovodrun, of plain mpirun and
// mpiexec, and of anyone who types ssh in a pod.
//
// # Connection sharing
//
// Under the launcher's mpirun the client does not connect itself: the small
// relay podmpi-rsh (package relay, cmd/launcher/podmpi-rsh) hands its
// command line and its stdin, stdout and stderr to the launcher, whose
// sharing server (package agent/launcher/share) runs this same client logic
// for it (Served) on a connection from its pool (the probe's, or one dialed
// on first use, as OpenSSH's ControlMaster shares one). Everything below
// holds there too: the lines, exit statuses, signals, records and waiting
// are the same; cutting a session short closes its channel instead of the
// connection. A worker that does not answer a session request on the
// shared connection is waited for as a late worker is (below), without
// closing that connection (package agent/launcher/share).
//
// # Waiting for late workers
//
// A worker that does not resolve or does not accept yet (a pod scheduled
// late, an agent still starting, a load-shedding refusal) is retried with
// jittered backoff (sshclient.Retry, the loop of the launcher's probe) up to
// PODMPI_SSH_WAIT (default 2m), with one progress line on stderr every 5 s
// (none with -q). -o ConnectionAttempts=N and -o ConnectTimeout=S shorten
// the wait, never lengthen it: at most N attempts, and at most N x S in all
// (see runner.retry). PODMPI_SSH_WAIT=0 turns waiting off: ConnectionAttempts
// attempts one second apart, as OpenSSH. Permanent failures (auth, host key,
// handshake with something that is not worker-agent) end at once, and so
// does, on the launcher's own pod, a connection refused by an address of
// that pod: no worker-agent runs there (phase not-worker-agent, naming it).
//
// # Configuration
//
// Settings come from the command line first, then from the environment
// twins of the launcher/worker-agent flags (mpirun passes its environment to
// its ssh program), then defaults:
//
//	PODMPI_SSH_AUTH_DIR                  auth dir holding id_rsa and id_rsa.pub (default: $HOME/.ssh, /home/mpiuser/.ssh, /root/.ssh)
//	PODMPI_SSH_PORT                      port when no -p / -o Port (default 2222)
//	PODMPI_SSH_USER                      login name when no -l / user@ (default $USER, else mpiuser)
//	PODMPI_SSH_CONNECT_TIMEOUT           per-attempt connect timeout, "10" or "10s" (default 10s; -o ConnectTimeout wins)
//	PODMPI_SSH_INSECURE_IGNORE_HOST_KEY  "true" accepts any host key (debugging only; warns unless -q)
//	PODMPI_SSH_WAIT                      how long to wait for a late worker, "120" or "2m" (default 2m; 0: no waiting)
//	PODMPI_RSH_FAILURE_DIR               directory where each remote command that cannot be run (exit 255) leaves a JSON
//	                                     record (FailureRecord); the launcher sets it for mpirun and reads them
//	PODMPI_LAUNCHER_INSTANCE             the launcher instance to declare to the worker (package launcherid); the
//	                                     launcher sets it for mpirun, and a client on another pod ignores it
//
// # Host key checking
//
// -o StrictHostKeyChecking=no does not turn pinning off. Every MPI recipe
// passes it because OpenSSH would otherwise stop at an unknown host with no
// known_hosts to consult. Here nothing is learned on first use: the one
// acceptable host key is the job's own public key, read from the Secret
// every pod mounts, so there is no unknown host to accept. Honouring "no"
// would silently remove the only server authentication while the option
// appears in nearly every existing configuration. Only
// PODMPI_SSH_INSECURE_IGNORE_HOST_KEY=true disables pinning.
//
// # Exit status
//
// The remote command's exit status is returned unchanged. A command killed
// by a signal gives 128+signal number (143 for SIGTERM, 135 for SIGBUS), as
// a shell reports it, with one stderr line naming the signal; OpenSSH would
// exit 255. The SSH wire names only RFC 4254's signals; worker-agent names
// the others "BUS@podmpi" and so on (package signals), which this client
// reads. OpenSSH's sshd names them all "SIG@openssh.com", which says no
// number: the client then exits 128 and its line says so. Open
// MPI and Hydra treat any non-zero status of their ssh child as a failed
// daemon either way, and 128+n keeps the signal visible in Hydra's "EXIT
// CODE" and in logs. 255 stays reserved for "could not run the command",
// and covers bad arguments too (ssh(1) does the same, and mpirun reports the
// agent's status as the daemon's), with a "podmpi-rsh: usage: ..." line. A
// remote status 127 (the remote shell found no such program: orted not on
// the worker's PATH) is passed through after a diagnosis line in the
// probe's form (phase remote-command, the program, the fix).
//
// # Signals
//
// SIGINT, SIGTERM and SIGHUP received by this process are sent to the
// remote command as SSH "signal" requests (worker-agent delivers them to the
// command's process group) and the client keeps waiting for the exit
// status. If the command has not exited SignalGrace after the first signal,
// the session is closed (the client's own connection with it), which makes
// worker-agent kill the command's process tree, and the client exits
// 128+signal. mpirun's final SIGKILL of its ssh children drops the
// connection, or for a relay the launcher's session, with the same effect.
package rsh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/rsh/relay"
	"github.com/podmpi/podmpi/agent/signals"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/stream"
	"github.com/podmpi/podmpi/agent/version"
	"github.com/podmpi/podmpi/jobkey"
	"github.com/podmpi/podmpi/mpi"
)

// Environment twins read by Main.
var (
	EnvAuthDir        = cli.EnvName("ssh.auth-dir")
	EnvPort           = cli.EnvName("ssh.port")
	EnvUser           = cli.EnvName("ssh.user")
	EnvConnectTimeout = cli.EnvName("ssh.connect-timeout")
	EnvInsecure       = cli.EnvName("ssh.insecure-ignore-host-key")
	EnvWait           = cli.EnvName("ssh.wait")
)

// DefaultPort is worker-agent's SSH port (Trainer v2's and mpi-operator's 2222).
const DefaultPort = 2222

// SignalGrace is how long the client waits for the remote command to exit
// after forwarding a signal before it closes the connection.
const SignalGrace = 10 * time.Second

// DefaultWait is how long a worker that does not resolve or accept yet is
// waited for when PODMPI_SSH_WAIT is not set.
const DefaultWait = 2 * time.Minute

// retryDelay separates connection attempts (-o ConnectionAttempts) when
// waiting is off (PODMPI_SSH_WAIT=0), like OpenSSH's one second.
const retryDelay = time.Second

// progressEvery spaces the progress lines while the client waits.
const progressEvery = 5 * time.Second

const prefix = "podmpi-rsh: "

// Main runs the client with args (without argv[0]) and returns the exit
// status. env looks up environment variables (os.LookupEnv when nil). stdin
// may be nil (as with -n).
//
// When the process's own streams are the client's (a podmpi binary started
// as the client) and PODMPI_RSH_SOCKET names a launcher's socket, the
// launcher runs the command on the connection it holds to the worker
// (package relay); otherwise, or when the launcher cannot serve it, the
// client connects on its own.
func Main(ctx context.Context, args []string, env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	r := runner{env: env, stdin: stdin, stdout: stdout, stderr: stderr, sigs: sigs, grace: SignalGrace, retryDelay: retryDelay,
		progressEvery: progressEvery}
	if code, ok := r.relay(args, stdin == os.Stdin && stdout == os.Stdout && stderr == os.Stderr); ok {
		return code
	}
	return r.run(ctx, args)
}

type runner struct {
	env            func(string) (string, bool)
	stdin          io.Reader
	stdout, stderr io.Writer
	sigs           <-chan os.Signal
	grace          time.Duration
	retryDelay     time.Duration
	// backoff and maxBackoff shape the waiting (sshclient.Retry defaults
	// when zero); progressEvery spaces its progress lines.
	backoff, maxBackoff time.Duration
	progressEvery       time.Duration
	// quiet and command are -q and the remote command of this run.
	quiet   bool
	command string
	// unshared is why the launcher's connection is not used, for a debug
	// line under -v ("" when no launcher offered one).
	unshared string

	// The launcher's side of a shared session (Served): sessions opens
	// them on the connections it holds; pid is the relay's, for its
	// failure records; gone reports that the relay went away (nothing is
	// said to it then); and abort loosens the relay's streams so that no
	// copier stays blocked on them once the session is cut short.
	sessions Sessions
	pid      int
	gone     func() bool
	abort    func()
	// load reads the job configuration (sshclient.LoadJobConfig when nil;
	// the launcher's cache of it).
	load func(authDir, home, identity string) (sshclient.Config, error)
}

// relay has the launcher serve the command when it offers its connections
// (relay.EnvSocket) and the process's own streams are the client's (own):
// ok reports that it did, with the status to exit with. Otherwise it notes
// why in r.unshared and the client connects on its own.
func (r *runner) relay(args []string, own bool) (code int, ok bool) {
	sock := r.lookup(relay.EnvSocket)
	r.unshared = r.lookup(relay.EnvUnshared)
	if sock == "" {
		return 0, false
	}
	if !own {
		r.unshared = "the client's streams are not the process's"
		return 0, false
	}
	c := relay.Client{Socket: sock, Args: args, Env: os.Environ(), Stdio: [3]int{0, 1, 2}, Signals: r.sigs,
		Release: relay.CloseStdio}
	code, err := c.Run()
	var u *relay.Unserved
	switch {
	case errors.As(err, &u):
		r.unshared = u.Reason
		return 0, false
	case errors.Is(err, relay.ErrOutcomeUnknown):
		r.line("%v", err) // the streams are still the process's
	}
	return code, true
}

func (r *runner) lookup(name string) string {
	if r.env == nil {
		v, _ := os.LookupEnv(name)
		return v
	}
	v, _ := r.env(name)
	return v
}

func (r *runner) line(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	fmt.Fprintln(r.stderr, prefix+msg)
}

func (r *runner) fail(f *sshclient.Failure) int {
	if r.gone != nil && r.gone() {
		// The relay was killed: like a killed client, it says nothing and
		// leaves no record.
		return int(exitcode.RemoteShell)
	}
	r.line("%s", f.Error())
	if dir := r.lookup(EnvFailureDir); dir != "" {
		pid := r.pid
		if pid == 0 {
			pid = os.Getpid()
		}
		if err := WriteFailureRecord(dir, newFailureRecord(f, r.command, pid, time.Now())); err != nil {
			r.line("could not leave the failure record in %s (%s): %v", dir, EnvFailureDir, err)
		}
	}
	return int(exitcode.RemoteShell)
}

func (r *runner) run(ctx context.Context, args []string) int {
	opts, err := ParseArgs(args)
	if err != nil {
		r.line("usage: %v", err)
		return int(exitcode.RemoteShell)
	}
	if opts.Help {
		fmt.Fprint(r.stdout, Usage)
		return 0
	}
	if opts.Version {
		fmt.Fprintf(r.stderr, "podmpi %s: ssh-compatible client (OpenSSH's command line; job key, pinned host key)\n", version.Get())
		return 0
	}
	if opts.Verbose > 0 {
		for _, ig := range opts.Ignored {
			r.line("debug: ignoring %s: no effect in podmpi's client", ig)
		}
		if r.unshared != "" {
			r.line("debug: not using the launcher's shared connection (%s); connecting on its own", r.unshared)
		}
	}
	if !opts.Quiet {
		for _, w := range opts.Warnings {
			r.line("warning: %s", w)
		}
	}
	r.quiet, r.command = opts.Quiet, opts.Command
	port := opts.Port
	if port == 0 {
		port = DefaultPort
		if v := r.lookup(EnvPort); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return r.fail(&sshclient.Failure{Host: opts.Host, Port: DefaultPort, Phase: sshclient.PhaseConfig,
					Cause: fmt.Errorf("%s is not a port number", EnvPort), Hint: "set it to the workers' SSH port (2222) or unset it"})
			}
			port = p
		}
	}
	if opts.Command == "" {
		return r.fail(&sshclient.Failure{Host: opts.Host, Port: port, Phase: sshclient.PhaseConfig,
			Cause: errors.New("no remote command given"), Hint: "podmpi rsh runs commands for mpirun; it has no interactive shell"})
	}
	cfg, f := r.config(opts, port)
	if f != nil {
		return r.fail(f)
	}
	if f := cfg.Validate(opts.Host, port); f != nil {
		return r.fail(f)
	}
	if cfg.InsecureIgnoreHostKey && !opts.Quiet {
		r.line("warning: %s=true: the host key of %s is not verified", EnvInsecure, opts.Host)
	}

	retry, f := r.retry(opts, port)
	if f != nil {
		return r.fail(f)
	}
	if r.sessions != nil {
		return r.shared(ctx, opts, port, cfg, retry)
	}
	client, f := r.dial(ctx, opts, port, cfg, retry)
	if f != nil {
		return r.fail(f)
	}
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		return r.fail(sshclient.Classify(opts.Host, port, sshclient.PhaseRemoteCommand, fmt.Errorf("opening a session: %w", err)))
	}
	defer s.Close()
	// Cutting the connection ends everything on it at once.
	return r.session(ctx, s, opts, port, func() { client.Close() })
}

// shared runs the command in a session on the launcher's connection to
// the worker (r.sessions), dialing one as r.dial does when there is none.
// Cutting the session short closes only its channel: worker-agent ends the
// command's process group, and the connection's other sessions go on.
func (r *runner) shared(ctx context.Context, opts Options, port int, cfg sshclient.Config, retry sshclient.Retry) int {
	wait := DefaultWait
	if !retry.Deadline.IsZero() {
		wait = time.Until(retry.Deadline)
	}
	where := net.JoinHostPort(opts.Host, strconv.Itoa(port))
	s, end, f := r.sessions.Session(ctx, SessionRequest{Host: opts.Host, Port: port, Config: cfg, Wait: wait,
		Dial: func(ctx context.Context) (*ssh.Client, *sshclient.Failure) {
			return r.dial(ctx, opts, port, cfg, retry)
		},
		Stalled: func(waited time.Duration, others int) {
			if opts.Quiet {
				return
			}
			running := fmt.Sprintf("%d other sessions run on it", others)
			if others == 1 {
				running = "1 other session runs on it"
			}
			r.line("waiting for %s: no answer to a session request on the launcher's connection for %s (%s); trying another connection meanwhile, for up to %s",
				where, waited, running, wait.Round(time.Second))
		}})
	if f != nil {
		return r.fail(f)
	}
	defer end()
	defer s.Close()
	return r.session(ctx, s, opts, port, func() {
		s.Close()
		if r.abort != nil {
			r.abort()
		}
	})
}

// config builds the client configuration from options, environment and the
// auth dir.
func (r *runner) config(opts Options, port int) (sshclient.Config, *sshclient.Failure) {
	cfgFail := func(err error) *sshclient.Failure {
		hint := ""
		var ae *jobkey.Error
		if !errors.As(err, &ae) {
			hint = "fix the variable or unset it"
		}
		return &sshclient.Failure{Host: opts.Host, Port: port, Phase: sshclient.PhaseConfig, Cause: err, Hint: hint}
	}
	load := r.load
	if load == nil {
		load = sshclient.LoadJobConfig
	}
	cfg, err := load(r.lookup(EnvAuthDir), r.lookup("HOME"), opts.Identity)
	if err != nil {
		return cfg, cfgFail(err)
	}
	for _, path := range opts.Identities[min(1, len(opts.Identities)):] {
		s, err := jobkey.LoadSigner(path)
		if err != nil {
			return cfg, cfgFail(err)
		}
		cfg.ExtraSigners = append(cfg.ExtraSigners, s)
	}
	cfg.User = opts.User
	if cfg.User == "" {
		cfg.User = r.lookup(EnvUser)
	}
	if cfg.User == "" {
		cfg.User = r.lookup("USER")
	}
	if cfg.User == "" {
		cfg.User = sshclient.DefaultUser
	}
	if v := r.lookup(EnvInsecure); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, cfgFail(fmt.Errorf("%s is not a boolean", EnvInsecure))
		}
		cfg.InsecureIgnoreHostKey = b
	}
	cfg.Launcher = r.launcher(opts)
	cfg.ConnectTimeout = opts.ConnectTimeout
	if cfg.ConnectTimeout == 0 {
		if v := r.lookup(EnvConnectTimeout); v != "" {
			d, err := parseSeconds(v)
			if err != nil {
				return cfg, cfgFail(fmt.Errorf("%s: %w", EnvConnectTimeout, err))
			}
			cfg.ConnectTimeout = d
		}
	}
	return cfg, nil
}

// launcher is the launcher instance this client declares to the worker:
// the one launcherid.EnvName names when the client runs on that
// launcher's pod (its host name), so that a worker-agent can end what an
// older, lost instance of the job's launcher left running. On any other
// pod (the variable reached a rank's environment, and the rank runs ssh)
// the client is not the launcher and declares nothing; so does a client
// without the variable.
func (r *runner) launcher(opts Options) launcherid.Instance {
	v := r.lookup(launcherid.EnvName)
	if v == "" {
		return launcherid.Instance{}
	}
	inst, err := launcherid.ParseValue(v)
	host, _ := os.Hostname()
	switch {
	case err != nil:
		if opts.Verbose > 0 {
			r.line("debug: not declaring a launcher instance: %v", err)
		}
		return launcherid.Instance{}
	case !inst.OnHost(host):
		if opts.Verbose > 0 {
			r.line("debug: not declaring launcher instance %s: it is %s's, and this is %s", inst.Short(), inst.Hostname, host)
		}
		return launcherid.Instance{}
	}
	return inst
}

// retry is how the client waits for a worker that does not resolve or
// accept yet (transient failures; see sshclient.Retry):
//
//   - PODMPI_SSH_WAIT (default DefaultWait) bounds the wait. The command
//     line can shorten it, never lengthen it, as OpenSSH's own options bound
//     OpenSSH: -o ConnectionAttempts=N allows at most N attempts, and -o
//     ConnectTimeout=S (which also bounds each attempt, as in OpenSSH) caps
//     the whole wait at N x S (N = 1 when not given). A caller that passes
//     them (Horovod's pre-flight: ConnectTimeout=10, retried by Horovod
//     itself; Trainer's ConnectionAttempts=10) has said how long it waits.
//   - PODMPI_SSH_WAIT=0 is OpenSSH's behaviour: ConnectionAttempts attempts,
//     one second apart.
func (r *runner) retry(opts Options, port int) (sshclient.Retry, *sshclient.Failure) {
	wait := DefaultWait
	if v := r.lookup(EnvWait); v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			return sshclient.Retry{}, &sshclient.Failure{Host: opts.Host, Port: port, Phase: sshclient.PhaseConfig,
				Cause: fmt.Errorf("%s: %w", EnvWait, err), Hint: "set it to how long to wait for a worker, e.g. 2m, or 0 to try ConnectionAttempts times only"}
		}
		wait = d
	}
	if wait == 0 {
		return sshclient.Retry{MaxAttempts: opts.ConnectionAttempts, Initial: r.retryDelay, Fixed: true}, nil
	}
	if opts.ConnectTimeout > 0 {
		wait = min(wait, time.Duration(opts.ConnectionAttempts)*opts.ConnectTimeout)
	}
	rt := sshclient.Retry{Deadline: time.Now().Add(wait), Initial: r.backoff, Max: r.maxBackoff}
	if _, given := opts.Options["connectionattempts"]; given {
		rt.MaxAttempts = opts.ConnectionAttempts
	}
	return rt, nil
}

// dial connects, retrying transient failures as rt says, with a progress
// line on stderr every progressEvery while it waits (unless -q) and one
// line per retry under -v.
func (r *runner) dial(ctx context.Context, opts Options, port int, cfg sshclient.Config, rt sshclient.Retry) (*ssh.Client, *sshclient.Failure) {
	start := time.Now()
	lastProgress := start
	limit := "no time limit"
	if !rt.Deadline.IsZero() {
		limit = rt.Deadline.Sub(start).Round(time.Second).String()
	}
	rt.OnAttempt = func(n int, f *sshclient.Failure, _, next time.Duration) {
		if f == nil || next == 0 {
			return
		}
		switch {
		case opts.Verbose > 0:
			r.line("attempt %d: %s; retrying in %s", n, f.Error(), next.Round(time.Millisecond))
		case !opts.Quiet && r.progressEvery > 0 && time.Since(lastProgress) >= r.progressEvery:
			lastProgress = time.Now()
			r.line("waiting for %s: %s: %s (attempt %d, %s of %s)", net.JoinHostPort(opts.Host, strconv.Itoa(port)),
				f.Phase, f.CauseText(), n, time.Since(start).Round(time.Second), limit)
		}
	}
	var client *ssh.Client
	n, f := rt.Do(ctx, func(actx context.Context) *sshclient.Failure {
		c, f := sshclient.Dial(actx, opts.Host, port, cfg)
		client = c
		if ip := refusedHere(f); ip != nil && !cfg.Launcher.IsZero() {
			return launcherPodFailure(f, ip, cfg.Launcher.Hostname)
		}
		return f
	})
	if f != nil && n > 1 {
		g := *f
		g.Cause = fmt.Errorf("%w (gave up after %d attempts in %s)", f.Cause, n, time.Since(start).Round(time.Millisecond))
		return nil, &g
	}
	return client, f
}

// AbortWait bounds the wait for a session's streams after it was cut
// short: a stream the client's reader no longer drains (a full pipe, a
// socket) cannot hold the client past it.
const AbortWait = 5 * time.Second

// A session's streams are copied with a buffer of streamSmall while they
// trickle (an MPI daemon's few lines: the launcher serves one session per
// worker for the whole job) and streamLarge, x/crypto's packet size, once
// they stream.
const (
	streamSmall = 4 << 10
	streamLarge = 32 << 10
)

// session runs the command in s and returns the status to exit with. abort
// cuts the session short (after the signal grace, or when ctx ends).
func (r *runner) session(ctx context.Context, s *ssh.Session, opts Options, port int, abort func()) int {
	host := opts.Host
	outs, f := sessionOutputs(s, host, port)
	if f != nil {
		return r.fail(f)
	}
	var in io.WriteCloser
	if !opts.NoStdin && r.stdin != nil {
		var err error
		if in, err = s.StdinPipe(); err != nil {
			return r.fail(sshclient.Classify(host, port, sshclient.PhaseRemoteCommand, fmt.Errorf("opening the session's stdin: %w", err)))
		}
	}
	if err := s.Start(opts.Command); err != nil {
		return r.fail(&sshclient.Failure{Host: host, Port: port, Phase: sshclient.PhaseRemoteCommand,
			Cause: errors.New("the worker refused the exec request"), Hint: "worker-agent may be shutting down, or the server is not worker-agent; see its log"})
	}
	var copiers sync.WaitGroup
	for i, w := range []io.Writer{r.stdout, r.stderr} {
		copiers.Go(func() { drain(w, outs[i]) })
	}
	if in != nil {
		// Not waited for: it ends at the client's end of input, or when
		// the client's stdin closes (the process exits; the launcher
		// closes a relay's).
		go func() {
			_ = stream.Copy(in, r.stdin, streamSmall, streamLarge)
			_ = in.Close() // EOF to the remote command
		}()
	}
	waitErr := make(chan error, 1)
	go func() {
		err := s.Wait()
		copiers.Wait() // every byte of output is written before the status
		waitErr <- err
	}()
	// cut ends the session and waits (bounded) until its stdout and stderr
	// copiers are done, so that nothing writes after the client returns.
	cut := func() {
		abort()
		t := time.NewTimer(AbortWait)
		defer t.Stop()
		select {
		case <-waitErr:
		case <-t.C:
		}
	}
	var grace <-chan time.Time
	var first os.Signal
	for {
		select {
		case err := <-waitErr:
			return r.exitStatus(host, port, err)
		case sig := <-r.sigs:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = s.Signal(ssh.Signal(signals.SSHName(ss)))
			}
			if grace == nil {
				first = sig
				t := time.NewTimer(r.grace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			cut()
			ss, _ := first.(syscall.Signal)
			r.line("%s: remote command still running %s after %s was forwarded; session closed", net.JoinHostPort(host, strconv.Itoa(port)), r.grace, signals.Name(ss))
			return 128 + int(ss)
		case <-ctx.Done():
			cut()
			return r.fail(&sshclient.Failure{Host: host, Port: port, Phase: sshclient.PhaseRemoteCommand,
				Cause: fmt.Errorf("interrupted: %w", context.Cause(ctx)), Hint: "the session was closed; worker-agent stops the remote command"})
		}
	}
}

// sessionOutputs are the readers of the session's stdout and stderr.
func sessionOutputs(s *ssh.Session, host string, port int) ([2]io.Reader, *sshclient.Failure) {
	var outs [2]io.Reader
	var err error
	if outs[0], err = s.StdoutPipe(); err == nil {
		outs[1], err = s.StderrPipe()
	}
	if err != nil {
		return outs, sshclient.Classify(host, port, sshclient.PhaseRemoteCommand, fmt.Errorf("opening the session's output: %w", err))
	}
	return outs, nil
}

// drain copies one of the session's outputs to w. When w fails (its reader
// went away), the rest is read and dropped, so that the remote command is
// never blocked on a window nobody empties.
func drain(w io.Writer, r io.Reader) {
	if err := stream.Copy(w, r, streamSmall, streamLarge); err != nil {
		_ = stream.Copy(io.Discard, r, streamSmall, streamLarge)
	}
}

func (r *runner) exitStatus(host string, port int, err error) int {
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Signal() != "":
		return r.killedBy(host, port, ee.Signal(), ee.ExitStatus())
	case errors.As(err, &ee):
		if ee.ExitStatus() == int(exitcode.CommandNotFound) && !r.quiet {
			prog := commandName(r.command)
			r.line("%s", (&sshclient.Failure{Host: host, Port: port, Phase: sshclient.PhaseRemoteCommand,
				Cause: fmt.Errorf("%s not found: the remote shell exited with status 127", prog),
				Hint:  fmt.Sprintf("%s is not on the PATH of worker-agent on %s; install it (the MPI) in the worker image or set PATH in the worker container", prog, host)}).Error())
		}
		return ee.ExitStatus()
	case errors.As(err, &missing):
		return r.fail(&sshclient.Failure{Host: host, Port: port, Phase: sshclient.PhaseRemoteCommand, Cause: err,
			Hint: "the session ended without an exit status: the connection was lost or worker-agent stopped"})
	}
	return r.fail(sshclient.Classify(host, port, sshclient.PhaseRemoteCommand, err))
}

// killedBy is the status of a remote command that died of the signal the
// server named name in its "exit-signal" message: 128+N, as a shell says,
// for every signal worker-agent names (RFC 4254's and its "BUS@podmpi"
// for the others; see package signals). OpenSSH's sshd names the others
// "SIG@openssh.com" and the number is lost: then x/crypto's status stands
// (128), and the line says the signal is unknown.
func (r *runner) killedBy(host string, port int, name string, status int) int {
	where := net.JoinHostPort(host, strconv.Itoa(port))
	sig, ok := signals.ParseSSHExit(name)
	if !ok {
		r.line("%s: remote command killed by a signal the server did not name (%q); exit status %d", where, printable(name), status)
		return status
	}
	r.line("%s: remote command killed by signal %d (%s)", where, int(sig), signals.Name(sig))
	return 128 + int(sig)
}

// commandName names the program a remote command runs, for the exit-127
// line (mpi.CommandName: the MPI daemon it runs, else the program of its
// first command).
func commandName(cmd string) string {
	if p := mpi.CommandName(cmd); p != "" {
		return printable(p)
	}
	return "the command"
}
