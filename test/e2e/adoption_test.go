package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/test/harness"
)

// The adoption tests start MPI the ways people do without `launcher --`,
// with only podmpi's bin dir (make build's layout, the images'
// /opt/podmpi/bin) in front of the system PATH, in the launcher pod and in
// every worker-agent: the Kubeflow SDK's command with Trainer's launcher
// environment, a plain `mpiexec.hydra -f`, horovodrun's ssh lines, a worker
// that starts late, a worker with the wrong key.

// binDir is make build's bin/ of this run (setup links the names).
func binDir() string { return filepath.Dir(bin.Launcher) }

// adoptPath is PATH with podmpi's bin dir first.
func adoptPath() string { return binDir() + ":/usr/bin:/bin" }

// adoptAgent is a worker-agent with podmpi's bin dir first on its PATH (so
// on its sessions'), offering one slot: the SDK's script writes one file
// per pod, and one rank per pod writes it once.
func adoptAgent(o AgentOptions) AgentOptions {
	o.Slots = 1
	o.Env = append(o.Env, "PATH="+adoptPath())
	return o
}

// adoptEnv is the environment of a command in the launcher pod: podmpi's
// bin dir first on PATH, HOME (the SDK's home stand-in) and TMPDIR in run,
// the launcher's settings as the PODMPI_* twins a runtime sets.
func adoptEnv(run string, extra ...string) []string {
	return append([]string{"PATH=" + adoptPath(), "HOME=" + run, "TMPDIR=" + run, "SHELL=/bin/sh",
		"PODMPI_SSH_AUTH_DIR=" + authDir, "PODMPI_LOG_FORMAT=text",
		"PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
		"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"),
		"PODMPI_MPIRUN_TIMEOUT=90s"}, append(ShareEnv(), extra...)...)
}

// startAdopted starts name (found on env's PATH, argv[0] as given) in the
// launcher pod as the arbitrary uid.
func (f *fixture) startAdopted(t *testing.T, ctx context.Context, env []string, name string, args ...string) *harness.Proc {
	t.Helper()
	f.seq++
	p, err := f.c.Start(ctx, 0, AnyUID, AnyGID, env, filepath.Join(f.c.LogDir(), fmt.Sprintf("adopted-%d.log", f.seq)), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// runDir is a fresh directory the launcher's uid can write.
func (f *fixture) runDir(t *testing.T, name string) string {
	t.Helper()
	f.seq++
	d := filepath.Join(work, fmt.Sprintf("run-%s-%s-%d", f.job, name, f.seq))
	if err := MakeDir(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeHostfile writes a Trainer-style hostfile ("<host>.<job> slots=N")
// for the pods given, readable by every pod.
func writeHostfile(t *testing.T, f *fixture, name string, slots int, pods ...int) string {
	t.Helper()
	var b strings.Builder
	for _, pod := range pods {
		fmt.Fprintf(&b, "%s slots=%d\n", f.c.Pod(pod).ShortName, slots)
	}
	p := filepath.Join(work, "hostfile-"+f.job+"-"+name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var sdkRankLine = regexp.MustCompile(`(?m)^sdk-rank (\d+) of (\d+) on (\S+)$`)

// checkSDKRanks checks one "sdk-rank R of N on HOST" line per rank, on the
// hosts given.
func checkSDKRanks(t *testing.T, out string, hosts ...string) {
	t.Helper()
	got := map[string]int{}
	for _, m := range sdkRankLine.FindAllStringSubmatch(out, -1) {
		if m[2] != fmt.Sprint(len(hosts)) {
			t.Errorf("rank line %q: want %d ranks", m[0], len(hosts))
		}
		got[m[3]]++
	}
	for _, h := range hosts {
		if got[h] != 1 {
			t.Errorf("sdk-rank lines per host %v, want one on each of %v; output:\n%s", got, hosts, out)
			return
		}
	}
}

// TestAdoption: 1 launcher pod + 3 worker pods, everything with podmpi's
// bin dir first on PATH.
func TestAdoption(t *testing.T) {
	ctx := testCtx(t, 8*time.Minute)
	f := newFixture(t, "ad", 3)
	for pod := 1; pod <= 3; pod++ {
		f.startAgent(t, ctx, pod, adoptAgent(AgentOptions{}))
	}
	const runFor = 90 * time.Second
	workers := []string{"ad-node-0-0", "ad-node-0-1", "ad-node-0-2"}

	// The Kubeflow SDK's command, unchanged but for the hostfile's path:
	// Trainer's runtime shape (runLauncherAsNode: the launcher's line last,
	// and it runs a rank too) and Trainer's launcher environment. podmpi's
	// mpirun runs the launcher's phases, then Open MPI 4's mpirun with the
	// launcher's hostfile; every rank writes $HOME/fn.py and runs it.
	sdkHostfile := writeHostfile(t, f, "sdk", 1, 1, 2, 3, 0)
	sdk := SDKCommand(sdkHostfile, "$HOME/fn.py", "python3", SDKFunction)
	t.Run("sdk/openmpi4", func(t *testing.T) {
		run := f.runDir(t, "sdk")
		start := time.Now()
		p := f.startAdopted(t, ctx, adoptEnv(run, TrainerLauncherEnv(sdkHostfile, 1)...), sdk[0], sdk[1:]...)
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		checkSDKRanks(t, r.out, append(workers, "ad-launcher-0-0")...)
		for _, want := range []string{"== probe (3/3 workers reachable)", "/usr/bin/orted",
			"replacing the command's hostfile with the launcher's", "== init done in", "ad-launcher-0-0.ad slots=1"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("output lacks %q: the SDK's command did not get the launcher's phases", want)
			}
		}
		for _, h := range workers {
			if b, err := os.ReadFile(filepath.Join(work, "home-"+h, "fn.py")); err != nil || !strings.Contains(string(b), "def train():") {
				t.Errorf("%s: the SDK script did not write $HOME/fn.py: %v", h, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(run, "termination-log")); err != nil || !strings.Contains(string(b), "exit code 0") {
			t.Errorf("termination message %q (%v)", b, err)
		}
	})

	// A plain `mpiexec.hydra -f <Trainer's hostfile>`, as typed in a shell:
	// Hydra rejects "host slots=N" itself ("token slots not supported");
	// podmpi's mpiexec.hydra hands it the launcher's host:N file.
	t.Run("mpich/mpiexec.hydra-f", func(t *testing.T) {
		hf := writeHostfile(t, f, "hydra", 1, 1, 2, 3)
		run := f.runDir(t, "hydra")
		start := time.Now()
		p := f.startAdopted(t, ctx, adoptEnv(run), "mpiexec.hydra", "-f", hf, "-np", "3", "hostname")
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		want := map[string]int{"ad-node-0-0": 1, "ad-node-0-1": 1, "ad-node-0-2": 1}
		if got := countHosts(r.out, want); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("hostname lines per worker = %v, want %v; output:\n%s", got, want, r.out)
		}
		if !strings.Contains(r.out, "ad-node-0-0.ad:1") || !strings.Contains(r.out, "option=-f") {
			t.Errorf("no Hydra-format hostfile replacing the command's; output:\n%s", r.out)
		}
	})

	// `launcher -- mpiexec.hydra ...` keeps working with the bin dir first:
	// its mpiexec.hydra is the real one (Hydra finds its proxy next to it).
	t.Run("launcher-dashdash/bin-first", func(t *testing.T) {
		start := time.Now()
		p := f.launchEnv(t, ctx, []string{"PATH=" + adoptPath()}, f.workersFlag(3), "mpiexec.hydra", "hostname")
		r := wait(t, p, start, runFor)
		mustSucceed(t, r)
		if n := strings.Count(r.out, "== init done"); n != 1 {
			t.Errorf("the phases ran %d times, want once", n)
		}
	})

	// horovodrun's lines: the pre-flight (options after the host, -p after
	// the host, ConnectTimeout) and a task (the remote command as one word)
	// through podmpi's ssh, with the remote exit status passed through.
	w := f.c.Pod(1).ShortName
	t.Run("horovodrun/ssh", func(t *testing.T) {
		run := f.runDir(t, "hvd")
		preflight := []string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", w, "-p", "2222", "-o", "ConnectTimeout=10", "true"}
		o, e, code, err := f.c.Run(ctx, 0, AnyUID, AnyGID, adoptEnv(run), "ssh", preflight...)
		if err != nil || code != 0 {
			t.Fatalf("horovodrun pre-flight: exit %d %v\n%s%s", code, err, o, e)
		}
		task := []string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", w, "-p", "2222",
			`cd /tmp > /dev/null 2>&1 ; HOROVOD_RANK=0 HOROVOD_SIZE=1 sh -c 'echo "rank $HOROVOD_RANK in $(pwd) on $(hostname)"; exit 7'`}
		o, e, code, err = f.c.Run(ctx, 0, AnyUID, AnyGID, adoptEnv(run), "ssh", task...)
		if err != nil || code != 7 || o != "rank 0 in /tmp on ad-node-0-0\n" {
			t.Fatalf("horovodrun task: exit %d (want 7) %v, stdout %q, stderr %q", code, err, o, e)
		}
	})

	// The same horovodrun task line through /usr/bin/ssh (OpenSSH) and
	// through podmpi's ssh to one worker-agent whose shell records the
	// command string it receives: byte for byte the same.
	t.Run("ssh/same-command-as-openssh", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/ssh"); err != nil {
			t.Skip("/usr/bin/ssh is not installed (apt-get install -y openssh-client)")
		}
		rec := filepath.Join(work, "ssh-record")
		if err := MakeDir(rec); err != nil {
			t.Fatal(err)
		}
		recorder := filepath.Join(work, "record-shell")
		script := "#!/bin/sh\n# worker-agent runs SHELL -c COMMAND: $2 is the command string as received.\n" +
			"f=$(mktemp \"" + rec + "/cmd.XXXXXX\") || exit 99\nprintf '%s' \"$2\" > \"$f\"\nexec /bin/sh -c \"$2\"\n"
		if err := os.WriteFile(recorder, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		w3 := f.c.Pod(3).ShortName
		f.startAgent(t, ctx, 3, adoptAgent(AgentOptions{Args: []string{"--ssh.shell", recorder}}))
		defer f.startAgent(t, ctx, 3, adoptAgent(AgentOptions{}))
		remote := `cd /tmp > /dev/null 2>&1 ; HOROVOD_RANK=1 X="a b" sh -c 'echo "$X;" $HOROVOD_RANK' ; exit 7`
		hvd := []string{"-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", w3, "-p", "2222", remote, "extra", "'words'"}
		run := f.runDir(t, "bytes")
		o, e, code, err := f.c.Run(ctx, 0, AnyUID, AnyGID, adoptEnv(run), "ssh", hvd...)
		if err != nil || code != 7 || o != "a b; 1\n" {
			t.Fatalf("podmpi ssh: exit %d (want 7) %v, stdout %q, stderr %q", code, err, o, e)
		}
		// OpenSSH as root (it needs a passwd entry) with the job key in a
		// 0600 copy, no config, no known_hosts; the same argv after its
		// own options.
		key := filepath.Join(work, "openssh-id")
		b, err := os.ReadFile(filepath.Join(authDir, "id_rsa"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, b, 0o600); err != nil {
			t.Fatal(err)
		}
		openssh := append([]string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-l", "mpiuser"}, hvd...)
		o, e, code, err = f.c.Run(ctx, 0, -1, -1, []string{"HOME=" + run}, "/usr/bin/ssh", openssh...)
		if err != nil || code != 7 || o != "a b; 1\n" {
			t.Fatalf("/usr/bin/ssh: exit %d (want 7) %v, stdout %q, stderr %q", code, err, o, e)
		}
		files, _ := filepath.Glob(filepath.Join(rec, "cmd.*"))
		if len(files) != 2 {
			t.Fatalf("%d recorded commands, want 2 (one per client): %v", len(files), files)
		}
		var got []string
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(b))
		}
		want := remote + " extra 'words'"
		if got[0] != got[1] || got[0] != want {
			t.Fatalf("remote command strings differ:\n%q\n%q\nwant both %q", got[0], got[1], want)
		}
		t.Logf("both clients sent %q", got[0])
	})

	// A worker whose agent starts 5 s late: the SDK's command waits in the
	// launcher's probe, and a horovodrun task line waits in podmpi's ssh
	// (with its progress line), and both go on once it listens.
	t.Run("late-worker", func(t *testing.T) {
		f.stopAgent(t, 3)
		run := f.runDir(t, "late")
		start := time.Now()
		job := f.startAdopted(t, ctx, adoptEnv(run, TrainerLauncherEnv(sdkHostfile, 1)...), sdk[0], sdk[1:]...)
		sshLog := filepath.Join(run, "ssh.log")
		sshRun := f.runDir(t, "late-ssh")
		ssh, err := f.c.Start(ctx, 0, AnyUID, AnyGID, adoptEnv(sshRun), sshLog, "ssh",
			"-o", "StrictHostKeyChecking=no", f.c.Pod(3).ShortName, "-p", "2222", "echo late-ok")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ssh.Stop() })
		// The client says it waits (after ~5 s); then the agent starts.
		sshtest.Eventually(t, 30*time.Second, "podmpi's ssh to say it waits", func() bool {
			b, _ := os.ReadFile(sshLog)
			return strings.Contains(string(b), "waiting for "+f.c.Pod(3).ShortName+":2222: ")
		})
		select {
		case <-job.Done():
			b, _ := os.ReadFile(job.Log)
			t.Fatalf("the SDK's command ended before the worker started; output:\n%s", b)
		default:
		}
		f.startAgent(t, ctx, 3, adoptAgent(AgentOptions{}))
		r := wait(t, job, start, runFor)
		mustSucceed(t, r)
		checkSDKRanks(t, r.out, append(workers, "ad-launcher-0-0")...)
		if err := ssh.WaitContext(ctx); err != nil || ssh.ExitCode() != 0 {
			b, _ := os.ReadFile(sshLog)
			t.Fatalf("ssh to the late worker: %v (exit %d)\n%s", err, ssh.ExitCode(), b)
		}
		if b, _ := os.ReadFile(sshLog); !strings.Contains(string(b), "late-ok\n") {
			t.Fatalf("ssh output %q", b)
		}
	})

	// A worker whose authorized_keys lacks the job key: the SDK's command
	// fails in the probe (exit 67) naming the worker and the phase, on
	// stderr and in the termination message.
	t.Run("wrong-key", func(t *testing.T) {
		f.startAgent(t, ctx, 3, adoptAgent(AgentOptions{AuthDir: wrongAuthDir}))
		defer f.startAgent(t, ctx, 3, adoptAgent(AgentOptions{}))
		run := f.runDir(t, "wrongkey")
		start := time.Now()
		p := f.startAdopted(t, ctx, adoptEnv(run, append(TrainerLauncherEnv(sdkHostfile, 1), "PODMPI_PROBE_TIMEOUT=10s")...), sdk[0], sdk[1:]...)
		r := wait(t, p, start, runFor)
		if r.code != 67 {
			t.Fatalf("exit %d, want 67 (probe failed); output:\n%s", r.code, r.out)
		}
		bad := f.c.Pod(3).ShortName
		line := diagLine(r.out, bad, "auth")
		if line == "" || !strings.Contains(line, "; hint: ") {
			t.Fatalf("no auth diagnosis naming %s on stderr; output:\n%s", bad, r.out)
		}
		term, err := os.ReadFile(filepath.Join(run, "termination-log"))
		if err != nil || !strings.Contains(string(term), bad+":2222: auth: ") || !strings.Contains(string(term), "exit code 67") {
			t.Fatalf("termination message does not name %s's auth failure: %q (%v)", bad, term, err)
		}
		if strings.Contains(r.out, "sdk-rank") {
			t.Errorf("the job ran after a failed probe")
		}
	})

	t.Run("no_leftovers", func(t *testing.T) {
		f.noLeftovers(t, 5*time.Second)
	})
}

// TestAdoptionOpenMPI5 runs the SDK's command shape with Debian trixie's
// Open MPI 5 (PRRTE), everything chrooted into the cached trixie root, with
// the static binaries' bin dir first on PATH. The root has no Python, so
// the script writes a shell function file and runs it with sh: the shape
// (mpirun --hostfile H bash -c '<write $HOME/fn, run it>') is the SDK's.
func TestAdoptionOpenMPI5(t *testing.T) {
	root := trixieRoot()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/prted")); err != nil {
		t.Skipf("Open MPI 5: no trixie root in %s (make e2e-ompi5 builds it)", root)
	}
	ctx := testCtx(t, 5*time.Minute)
	sbin, wrap := trixieSetup(t, ctx)
	static := filepath.Dir(sbin.Launcher)
	if err := LinkNames(ctx, static); err != nil {
		t.Fatal(err)
	}
	path := static + ":/usr/sbin:/usr/bin:/sbin:/bin" // the wrapper needs chroot from sbin

	f := newFixture(t, "a5", 3)
	f.startTrixieAgents(t, ctx, sbin, wrap, AgentOptions{Slots: 1, Env: []string{"PATH=" + path}}, 1, 2, 3)
	hf := writeHostfile(t, f, "sdk5", 1, 1, 2, 3)
	fn := `echo "sdk-rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname)"`
	sdk := SDKCommand(hf, "$HOME/fn.sh", "sh", fn)
	run := f.runDir(t, "sdk5")
	env := append([]string{"PATH=" + path, "HOME=" + run, "TMPDIR=" + run, "SHELL=/bin/sh",
		"PODMPI_SSH_AUTH_DIR=" + authDir, "PODMPI_LOG_FORMAT=text",
		"PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
		"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"), "PODMPI_MPIRUN_TIMEOUT=90s"},
		append(ShareEnv(), TrainerLauncherEnv(hf, 1)...)...)
	argv := append(append(append([]string{}, wrap[1:]...), sdk[0]), sdk[1:]...)
	start := time.Now()
	p, err := f.c.Start(ctx, 0, -1, -1, env, filepath.Join(f.c.LogDir(), "adopted-o5.log"), wrap[0], argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	r := wait(t, p, start, 120*time.Second)
	mustSucceed(t, r)
	checkSDKRanks(t, r.out, "a5-node-0-0", "a5-node-0-1", "a5-node-0-2")
	for _, want := range []string{"/usr/bin/prted", "implementation=openmpi5", "replacing the command's hostfile with the launcher's"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	f.noLeftovers(t, 5*time.Second)
}
