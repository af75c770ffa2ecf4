// Package mpirun prepares and supervises the user's unchanged `mpirun ...`
// command in the launcher pod.
//
// It does three things:
//
//   - Detection: which MPI the command belongs to, by running `mpirun
//     --version` and reading it with package mpi (Detect, Resolve).
//   - Wiring: the environment that makes that mpirun use the launcher's own
//     rsh program (agent/rsh's podmpi-rsh), the hostfile the launcher wrote,
//     the default slot count, the pod interface, and the allow-run-as-root
//     switches, under the names package mpi lists for the flavour
//     (Wiring.Env). A variable the user already set is never overridden; it
//     is reported as kept.
//   - Supervision: Run starts mpirun as a child in its own process group,
//     forwards signals to it, enforces an optional deadline (SIGTERM, then
//     SIGKILL of the whole tree after a grace period), reaps orphaned zombies
//     when the launcher is PID 1 or a child subreaper, and passes mpirun's exit
//     status through.
package mpirun

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/mpi"
)

// DetectTimeout bounds each `--version` run of Detect.
const DetectTimeout = 10 * time.Second

// maxDetectOutput bounds the output Detect reads.
const maxDetectOutput = 64 << 10

// Detect runs `<mpirun> --version` (at most DetectTimeout, output capped at
// 64 KiB) and identifies the MPI from its output. When that output is not
// recognised it tries `<mpirun> -V` (Intel's and ORTE's short form), and
// then falls back to the program's name (NameHint) with an empty version. The
// program is looked up on PATH when mpirun has no slash.
func Detect(ctx context.Context, mpirun string) (mpi.Implementation, string, error) {
	path := mpirun
	if !strings.Contains(mpirun, "/") {
		p, err := exec.LookPath(mpirun)
		if err != nil {
			return "", "", fmt.Errorf("detecting the MPI: %q is not on PATH: %w", mpirun, err)
		}
		path = p
	}
	var firstErr error
	for _, flag := range []string{"--version", "-V"} {
		out, err := runVersion(ctx, path, flag)
		impl, v, perr := mpi.ParseVersionOutput(out)
		if perr == nil {
			return impl, v, nil
		}
		if firstErr == nil {
			if err != nil {
				firstErr = fmt.Errorf("running %s %s: %w (output: %q)", path, flag, err, mpi.FirstLine(out))
			} else {
				firstErr = fmt.Errorf("%s %s: %w", path, flag, perr)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if impl, ok := mpi.NameHint(path); ok {
		return impl, "", nil
	}
	return "", "", fmt.Errorf("detecting the MPI: %w; set --mpi.implementation to openmpi, openmpi5, mpich or intelmpi", firstErr)
}

func runVersion(ctx context.Context, path, flag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, DetectTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, flag)
	var buf limitedBuffer
	buf.max = maxDetectOutput
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The whole group: Intel's mpirun is a script around mpiexec.hydra.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return buf.String(), err
}

// limitedBuffer keeps the first max bytes written and discards the rest
// while reporting success, so the child never blocks on a full pipe.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// InstalledHint names the MPI whose daemons are installed beside the
// launcher program prog (after its symlinks: Debian's /usr/bin/mpirun goes
// through /etc/alternatives): orted beside it is Open MPI 4, prted Open MPI
// 5, hydra_pmi_proxy MPICH, hydra_bstrap_proxy too Intel MPI, as each
// installs them in one bin directory. ok is false when none is there, or
// daemons of more than one are (a shared /usr/bin).
func InstalledHint(prog string) (impl mpi.Implementation, ok bool) {
	if r, err := filepath.EvalSymlinks(prog); err == nil {
		prog = r
	}
	dir := filepath.Dir(prog)
	var found []mpi.Implementation
	for _, i := range mpi.Implementations {
		all := len(i.Daemons()) > 0
		for _, d := range i.Daemons() {
			all = all && execpath.Look(d, dir) != ""
		}
		if all {
			found = append(found, i)
		}
	}
	if slices.Contains(found, mpi.IntelMPI) {
		// Intel MPI's directory holds MPICH's one daemon too.
		found = slices.DeleteFunc(found, func(i mpi.Implementation) bool { return i == mpi.MPICH })
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// Identify names the MPI of the launcher program prog, the way Resolve
// would, for a caller that runs it without the launcher's phases (the
// mpirun shim): spec when it names one (--mpi.implementation), else what
// prog's name says (mpi.NameHint), else the daemons installed beside it
// (InstalledHint), else Detect on prog. ok is false when nothing says.
func Identify(ctx context.Context, spec, prog string) (mpi.Implementation, bool) {
	if impl, auto, err := mpi.ParseImplementation(spec); err == nil && (!auto || impl != "") {
		return impl, true
	}
	if impl, ok := mpi.NameHint(prog); ok {
		return impl, true
	}
	if impl, ok := InstalledHint(prog); ok {
		return impl, true
	}
	impl, _, err := Detect(ctx, prog)
	return impl, err == nil && impl != ""
}

// DetectProgram is the program Resolve runs --version on for a command
// whose argv[0] is argv0: argv0 itself when it names an MPI launcher, else
// "mpirun" (the user's command may be `bash -c "mpirun ..."`).
func DetectProgram(argv0 string) string {
	if mpi.IsLauncher(argv0) {
		return argv0
	}
	return "mpirun"
}

// Resolve turns the --mpi.implementation value spec and the user's command
// argv0 into one mpi.Implementation and its version ("" when unknown):
//
//   - an explicit implementation is returned as is, without running anything;
//   - "openmpi" runs Detect and takes its major version when Detect says Open
//     MPI; otherwise mpi.OpenMPI4;
//   - "auto" runs Detect on argv0 when it names an MPI launcher, else on
//     "mpirun" from PATH (the user's command may be `bash -c "mpirun ..."`),
//     and fails with a hint to set --mpi.implementation when that fails.
func Resolve(ctx context.Context, spec, argv0 string) (mpi.Implementation, string, error) {
	impl, auto, err := mpi.ParseImplementation(spec)
	if err != nil {
		return "", "", err
	}
	if !auto {
		return impl, "", nil
	}
	got, v, derr := Detect(ctx, DetectProgram(argv0))
	if impl == mpi.OpenMPI4 { // "openmpi": refine the major only
		if derr == nil && got.OpenMPI() {
			return got, v, nil
		}
		return mpi.OpenMPI4, "", nil
	}
	if derr != nil {
		return "", "", derr
	}
	return got, v, nil
}
