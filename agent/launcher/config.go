package launcher

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/kube"
	"github.com/podmpi/podmpi/agent/launcher/discovery"
	"github.com/podmpi/podmpi/agent/launcher/mpirun"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

// Config is everything a launcher run needs. The settings are the
// launcher's flags: Bind registers one flag per setting on the field itself,
// with the field's current value as its default, so Defaults() is the one
// place defaults are written; cli.ApplyEnv then fills PODMPI_* twins, and
// Validate checks every range once. The fields after Log are what the
// process wires in (logger, streams, the command after "--").
type Config struct {
	// Discovery holds --workers, --hostfile, --discovery.service,
	// --discovery.template, --workers-expected and --self. An empty source
	// list means the operator's hostfile at discovery.DefaultHostfile when
	// present; an empty Self means this pod's hostname.
	Discovery        discovery.Spec
	DiscoveryTimeout time.Duration
	Resolver         discovery.Resolver // nil: the system resolver

	// Slots is --slots: 0 for auto (ask each worker-agent), else the count
	// every worker gets.
	Slots             int
	DefaultSlots      int  // slots for hosts neither the agent nor the source counts, with SlotsAllowDefault
	SlotsAllowDefault bool // run such hosts with DefaultSlots instead of failing (exit 72)
	WorkerWebPort     int

	Implementation string // auto|openmpi|openmpi4|openmpi5|intelmpi|mpich

	AuthDir               string
	SSHPort               int
	SSHUser               string
	InsecureIgnoreHostKey bool
	// SSHWait is how long the rsh client mpirun runs waits for a worker that
	// does not resolve or accept yet (PODMPI_SSH_WAIT, which it reads).
	SSHWait time.Duration
	// ShareConnections serves the sessions of the podmpi-rsh processes
	// mpirun starts on the launcher's own connection to each worker (the
	// probe's, or one opened on first use), over a socket in its private
	// directory, as OpenSSH's ControlMaster does; false lets every
	// podmpi-rsh connect on its own.
	ShareConnections bool
	// ProbeTimeout is the deadline by which every worker must have answered
	// for its slots and passed the SSH probe, counted from the end of the
	// DNS wait: the slots phase and the probe share it, so a late worker
	// is waited for once, not twice.
	ProbeTimeout   time.Duration
	ProbeParallel  int
	ProbeSSHSample int // see probe.Options.SSHSample; 0 probes every worker fully
	SkipProbe      bool

	HostfilePath  string // where the hostfile is written
	NoTreeSpawn   bool
	MPIRunTimeout time.Duration
	KillGrace     time.Duration

	// DiagnosisTimeout bounds asking every worker-agent what happened
	// after mpirun failed; DiagnosisWatch is how often they are asked
	// while it runs (0: never); LaunchGrace how long mpirun may take to
	// exit on its own after podmpi-rsh could not start a daemon, or after a
	// worker's pod was gone.
	DiagnosisTimeout time.Duration
	DiagnosisWatch   time.Duration
	LaunchGrace      time.Duration

	WebAddr string // /metrics while the launcher runs; "" turns it off
	PushURL string // Pushgateway to push the metrics to at the end
	// PushDeleteOnSuccess deletes the job's group from the Pushgateway when
	// it succeeded, so that only failures stay there.
	PushDeleteOnSuccess bool
	// MetricsNamespace, MetricsJobName and MetricsPod name the job in the
	// push's grouping key (see Launcher.PushGrouping); "" derives them.
	MetricsNamespace string
	MetricsJobName   string
	MetricsPod       string
	TerminationLog   string // Kubernetes' termination message file
	Log              cli.LogFlags

	// KubeAPI is "auto" (use the in-cluster API when a service-account
	// token is mounted: Events, pod states) or "off"; KubePodName and
	// KubePodUID are the launcher's own pod (downward API), found by its
	// address when empty.
	KubeAPI     string
	KubePodName string
	KubePodUID  string
	// Kube, when set, is the API client to use instead of connecting
	// (tests).
	Kube *kube.Client
	// Getenv reads the process environment (os.Getenv when nil): Trainer's
	// status API variables (KUBEFLOW_TRAINER_SERVER_*, status.go).
	Getenv func(string) string

	Command []string // the user's command, usually mpirun ...
	// Program is the file Command[0] runs when the caller resolved it (the
	// mpirun/mpiexec names of the launcher: the real program after podmpi's
	// directory on PATH); "" looks Command[0] up on PATH, skipping this
	// binary.
	Program    string
	Executable string // this binary, for the podmpi-rsh symlink; "" = os.Executable()
	TempDir    string
	// TuneRuntime sets the process's Go runtime for serving sessions while
	// mpirun runs (rsh.TuneServer): the launcher binary's choice, never a
	// test's that runs launchers in its own process.
	TuneRuntime bool

	Logger  *slog.Logger
	Metrics *Metrics
	Report  io.Writer // the human report (hostfile, probe table, phases); nil = none
	Stdout  io.Writer
	Stderr  io.Writer
	Stdin   io.Reader
}

// Defaults returns the default of every setting; New fills the zero fields
// of a Config from it.
func Defaults() Config {
	return Config{
		DiscoveryTimeout: 5 * time.Minute,
		DefaultSlots:     1,
		WorkerWebPort:    slots.DefaultWebPort,
		Implementation:   "auto",
		SSHPort:          2222,
		SSHWait:          2 * time.Minute,
		ShareConnections: true,
		ProbeTimeout:     2 * time.Minute,
		ProbeParallel:    64,
		ProbeSSHSample:   128,
		HostfilePath:     filepath.Join(os.TempDir(), "podmpi", "hostfile"),
		KillGrace:        10 * time.Second,
		DiagnosisTimeout: DefaultDiagnosisTimeout,
		DiagnosisWatch:   DefaultDiagnosisWatch,
		LaunchGrace:      DefaultLaunchGrace,
		WebAddr:          ":9022",
		TerminationLog:   "/dev/termination-log",
		Log:              cli.LogFlags{Format: "auto", Level: "info"},
		KubeAPI:          kube.ModeAuto,
	}
}

// Bind registers the launcher's flags on fs, each stored in its field of c
// and defaulting to the field's current value (start from Defaults()).
func (c *Config) Bind(fs *pflag.FlagSet) {
	c.Log.Register(fs)
	d := &c.Discovery
	fs.StringSliceVar(&d.Workers, "workers", d.Workers, "worker names, comma-separated, each optionally name=slots (highest precedence)")
	fs.StringVar(&d.Hostfile, "hostfile", d.Hostfile, "existing hostfile to read workers from, in any of the OpenMPI/Intel MPI/MPICH formats (default "+discovery.DefaultHostfile+" when present)")
	fs.StringVar(&d.Service, "discovery.service", d.Service, "headless Service to discover workers from: SRV _ssh._tcp.<service>, else its A records")
	fs.StringVar(&d.Template, "discovery.template", d.Template, "worker name template with {i}, e.g. tj-node-0-{i}.tj (Trainer v2) or pi-worker-{i}.pi.default.svc (mpi-operator)")
	fs.IntVar(&d.Expected, "workers-expected", d.Expected, "number of workers to wait for (with --discovery.service or --discovery.template)")
	fs.StringVar(&d.Self, "self", d.Self, "the launcher's own name as the hostfile lists it (default: this pod's hostname)")
	fs.IntVar(&c.DefaultSlots, "discovery.default-slots", c.DefaultSlots, "slots for workers whose source gives none: with --slots auto, only under --slots.allow-default")
	fs.DurationVar(&c.DiscoveryTimeout, "discovery.timeout", c.DiscoveryTimeout, "how long to wait for every worker name to resolve")
	fs.Var((*slotsValue)(&c.Slots), "slots", "slots per worker: auto (ask each worker-agent's /info until --probe.timeout, else the hostfile's count; a worker with neither fails the job, exit 72) or a positive integer")
	fs.BoolVar(&c.SlotsAllowDefault, "slots.allow-default", c.SlotsAllowDefault, "with --slots auto, run a worker whose agent gives no count and whose source gives none with --discovery.default-slots (a warning) instead of failing with exit 72")
	fs.IntVar(&c.WorkerWebPort, "worker.web-port", c.WorkerWebPort, "HTTP port of the worker-agents (for /info)")
	fs.StringVar(&c.Implementation, "mpi.implementation", c.Implementation, "MPI implementation: auto (from mpirun --version), openmpi, openmpi4, openmpi5, intelmpi or mpich")
	fs.StringVar(&c.AuthDir, "ssh.auth-dir", c.AuthDir, "directory with the job's id_rsa and id_rsa.pub (default: first of $HOME/.ssh, /home/mpiuser/.ssh, /root/.ssh holding id_rsa)")
	fs.IntVar(&c.SSHPort, "ssh.port", c.SSHPort, "SSH port of the worker-agents")
	fs.StringVar(&c.SSHUser, "ssh.user", c.SSHUser, "user name sent to workers (worker-agent accepts any; default $USER or mpiuser)")
	fs.BoolVar(&c.InsecureIgnoreHostKey, "ssh.insecure-ignore-host-key", c.InsecureIgnoreHostKey, "do not verify workers' host keys (INSECURE; the default pins them to id_rsa.pub)")
	fs.BoolVar(&c.ShareConnections, "ssh.share-connections", c.ShareConnections, "serve the sessions of mpirun's ssh program (podmpi-rsh) on the launcher's own connection to each worker, the probe's or one opened on first use, as OpenSSH's ControlMaster (false: every podmpi-rsh connects on its own)")
	fs.DurationVar(&c.SSHWait, "ssh.wait", c.SSHWait, "how long mpirun's ssh client (podmpi-rsh) waits for a worker that does not resolve or accept yet (0: OpenSSH's ConnectionAttempts only)")
	fs.DurationVar(&c.ProbeTimeout, "probe.timeout", c.ProbeTimeout, "deadline, from the end of the DNS wait, for every worker-agent to give its slots and pass the SSH probe; transient failures are retried until it")
	fs.IntVar(&c.ProbeParallel, "probe.parallel", c.ProbeParallel, "workers probed at once")
	fs.IntVar(&c.ProbeSSHSample, "probe.ssh-sample", c.ProbeSSHSample, "fully probe (handshake, host key, auth, MPI daemon) at most this many workers spread over the list; the rest get a DNS+TCP+SSH-banner check (0: probe every worker fully)")
	fs.BoolVar(&c.SkipProbe, "probe.skip", c.SkipProbe, "skip the SSH probe before mpirun")
	fs.StringVar(&c.HostfilePath, "hostfile.output", c.HostfilePath, "where to write the hostfile for mpirun")
	fs.DurationVar(&c.MPIRunTimeout, "mpirun.timeout", c.MPIRunTimeout, "stop mpirun after this long (0: no limit)")
	fs.DurationVar(&c.KillGrace, "mpirun.kill-grace", c.KillGrace, "after forwarding SIGTERM, wait this long before SIGKILL")
	fs.BoolVar(&c.NoTreeSpawn, "mpirun.no-tree-spawn", c.NoTreeSpawn, "make mpirun start every remote daemon itself (Open MPI plm_rsh_no_tree_spawn)")
	fs.DurationVar(&c.DiagnosisTimeout, "diagnosis.timeout", c.DiagnosisTimeout, "after mpirun fails, how long to ask every worker-agent what happened (/events) before naming the root cause")
	fs.DurationVar(&c.DiagnosisWatch, "diagnosis.watch-interval", c.DiagnosisWatch, "while mpirun runs, how often every worker-agent is asked for its account, so that a worker that stops answering is seen when it happens (0: only after a failure)")
	fs.DurationVar(&c.LaunchGrace, "diagnosis.launch-grace", c.LaunchGrace, "after podmpi-rsh could not start an MPI daemon (exit 73), or a worker's pod is gone (exit 74), how long mpirun may take to exit on its own before the launcher stops it")
	fs.StringVar(&c.WebAddr, "web.listen-address", c.WebAddr, "address for /metrics during init and while mpirun runs (empty: off)")
	fs.StringVar(&c.PushURL, "metrics.push-url", c.PushURL, "Prometheus Pushgateway URL to push the metrics to at the end (PUT, grouped by namespace, job_name and pod)")
	fs.BoolVar(&c.PushDeleteOnSuccess, "metrics.push-delete-on-success", c.PushDeleteOnSuccess, "when the job succeeded, delete its group from the Pushgateway instead of pushing (only failures stay)")
	fs.StringVar(&c.MetricsNamespace, "metrics.namespace", c.MetricsNamespace, "namespace label of the push (default: the service account's namespace; set it from the downward API metadata.namespace)")
	fs.StringVar(&c.MetricsJobName, "metrics.job-name", c.MetricsJobName, "job_name label of the push (default: from the launcher's host name, <job>-launcher-0-0 or <job>-launcher)")
	fs.StringVar(&c.MetricsPod, "metrics.pod", c.MetricsPod, "pod label of the push (default: this pod's host name; set it from the downward API metadata.name)")
	fs.StringVar(&c.TerminationLog, "termination-log", c.TerminationLog, "file for the root-cause message Kubernetes shows in the pod status")
	fs.StringVar(&c.KubeAPI, "kube.api", c.KubeAPI, "auto: with a service-account token (and deploy/rbac), record Events on the TrainJob/MPIJob and read the job's pod states; off: never use the Kubernetes API")
	fs.StringVar(&c.KubePodName, "kube.pod-name", c.KubePodName, "the launcher's own pod (downward API metadata.name; default: found by this pod's address)")
	fs.StringVar(&c.KubePodUID, "kube.pod-uid", c.KubePodUID, "the launcher's own pod uid (downward API metadata.uid), for its Events")
}

// slotsValue is --slots as a flag: "auto" (or "") is 0, else a count,
// parsed once by slots.ParseMode when the flag or its twin is set.
type slotsValue int

func (v *slotsValue) String() string {
	if *v == 0 {
		return "auto"
	}
	return strconv.Itoa(int(*v))
}

func (v *slotsValue) Set(s string) error {
	n, err := slots.ParseMode(s)
	if err != nil {
		return fmt.Errorf("want \"auto\" or an integer in 1..%d (flag --slots or %s)", hostfile.MaxSlots, cli.EnvName("slots"))
	}
	*v = slotsValue(n)
	return nil
}

func (v *slotsValue) Type() string { return "count" }

// UsageError is a setting out of range: exit 64, nothing started.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Upper bounds of the count flags: far above any real job, low enough that
// a typo (an extra digit, a negative number read as unsigned) is caught
// before it sizes a worker pool or a host list.
const (
	maxWorkers  = discovery.MaxExpected
	maxParallel = 4096
)

// Validate checks every setting's range once flags and environment twins
// are applied, before anything starts: a value out of range is a
// *UsageError naming the flag, its twin and the valid range, never a silent
// default.
func (c *Config) Validate() error {
	var errs []string
	bad := func(flag, got, want string) {
		errs = append(errs, fmt.Sprintf("--%s (or %s) is %s: want %s", flag, cli.EnvName(flag), got, want))
	}
	intIn := func(flag string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(flag, strconv.Itoa(v), fmt.Sprintf("an integer in %d..%d", lo, hi))
		}
	}
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			bad(flag, d.String(), "a duration > 0, e.g. 30s or 5m")
		}
	}
	intIn("workers-expected", c.Discovery.Expected, 0, maxWorkers)
	if c.Discovery.Template != "" && c.Discovery.Expected == 0 {
		errs = append(errs, "--discovery.template needs --workers-expected N")
	}
	intIn("discovery.default-slots", c.DefaultSlots, 1, hostfile.MaxSlots)
	positive("discovery.timeout", c.DiscoveryTimeout)
	intIn("slots", c.Slots, 0, hostfile.MaxSlots)
	intIn("worker.web-port", c.WorkerWebPort, 1, 65535)
	if _, _, err := mpi.ParseImplementation(c.Implementation); err != nil {
		bad("mpi.implementation", strconv.Quote(c.Implementation), "auto, openmpi, openmpi4, openmpi5, mpich or intelmpi")
	}
	intIn("ssh.port", c.SSHPort, 1, 65535)
	if m := strings.ToLower(strings.TrimSpace(c.KubeAPI)); m != kube.ModeAuto && m != kube.ModeOff {
		bad("kube.api", strconv.Quote(c.KubeAPI), "auto or off")
	}
	if c.SSHWait < 0 || c.SSHWait > 24*time.Hour {
		bad("ssh.wait", c.SSHWait.String(), "a duration from 0 (no waiting) to 24h")
	}
	positive("probe.timeout", c.ProbeTimeout)
	intIn("probe.parallel", c.ProbeParallel, 1, maxParallel)
	intIn("probe.ssh-sample", c.ProbeSSHSample, 0, maxWorkers)
	if strings.TrimSpace(c.HostfilePath) == "" {
		bad("hostfile.output", `""`, "the path of the hostfile to write")
	}
	if c.MPIRunTimeout < 0 {
		bad("mpirun.timeout", c.MPIRunTimeout.String(), "a duration >= 0 (0: no limit)")
	}
	positive("mpirun.kill-grace", c.KillGrace)
	if c.DiagnosisTimeout <= 0 || c.DiagnosisTimeout > maxDiagnosisTimeout {
		bad("diagnosis.timeout", c.DiagnosisTimeout.String(), "a duration > 0 and at most "+maxDiagnosisTimeout.String())
	}
	if c.DiagnosisWatch < 0 || c.DiagnosisWatch > maxDiagnosisWatch || (c.DiagnosisWatch > 0 && c.DiagnosisWatch < time.Second) {
		bad("diagnosis.watch-interval", c.DiagnosisWatch.String(), "0 (off) or a duration from 1s to "+maxDiagnosisWatch.String())
	}
	if c.LaunchGrace <= 0 || c.LaunchGrace > maxLaunchGrace {
		bad("diagnosis.launch-grace", c.LaunchGrace.String(), "a duration > 0 and at most "+maxLaunchGrace.String())
	}
	if c.WebAddr != "" {
		if err := checkListenAddress(c.WebAddr); err != nil {
			bad("web.listen-address", strconv.Quote(c.WebAddr), "host:port with a port in 0..65535, e.g. :9022, or empty to turn it off ("+err.Error()+")")
		}
	}
	if c.PushURL != "" {
		// The URL may carry credentials: it is not quoted back.
		if u, err := url.Parse(c.PushURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("metrics.push-url", "not an http(s) URL", "http://host:port of a Pushgateway, or empty")
		}
	}
	if len(errs) > 0 {
		return &UsageError{errors.New(strings.Join(errs, "\nlauncher: "))}
	}
	return nil
}

// checkListenAddress accepts what net.Listen("tcp", addr) accepts for a
// numeric or named port.
func checkListenAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("port %d out of range", n)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("unknown port %q", port)
	}
	return nil
}

// spec is the discovery spec of the run, and this pod's hostname as Self
// when none is given. With no source given, the workers come from the
// hostfile the command names (mpirun --hostfile, mpiexec -f: the Kubeflow
// SDK's command), else from the one an MPI default-hostfile variable names
// (OMPI_MCA_orte_default_hostfile, HYDRA_HOST_FILE, ...), else from the
// operator's hostfile when one is mounted at discovery.DefaultHostfile.
func (c *Config) spec() (discovery.Spec, error) {
	s := c.Discovery
	if !hasSource(s) {
		s.Hostfile = slots.CommandHostfile(c.Command)
	}
	if !hasSource(s) {
		s.Hostfile = envHostfile(os.LookupEnv)
	}
	if !hasSource(s) {
		present, err := discovery.PresentHostfile(discovery.DefaultHostfile)
		if err != nil {
			return s, &Failure{Phase: PhaseDiscovery, Code: exitcode.Config, Err: err,
				Hint: "the mounted hostfile cannot be read; check the ConfigMap volume at /etc/mpi"}
		}
		s.Hostfile = present
	}
	if s.Self == "" {
		s.Self, _ = os.Hostname()
	}
	return s, nil
}

// envHostfile is the hostfile the first MPI default-hostfile variable set
// (mpirun.HostfileVars) names, "" when none is.
func envHostfile(env func(string) (string, bool)) string {
	for _, name := range mpirun.HostfileVars {
		if v, ok := env(name); ok && strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// hasSource reports whether s names the workers by any source.
func hasSource(s discovery.Spec) bool {
	return s.Hostfile != "" || len(s.Workers) > 0 || s.Service != "" || s.Template != ""
}
