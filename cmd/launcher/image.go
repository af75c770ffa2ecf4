package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/imagecheck"
	"github.com/podmpi/podmpi/agent/launcher"
	"github.com/podmpi/podmpi/agent/layout"
)

// Podmpi rides into images that do not carry it: the binaries-only
// image's init container copies /opt/podmpi into an emptyDir (`launcher
// install`), mounted at /opt/podmpi in the launcher and worker containers.
// Only this binary and podmpi-rsh are static; worker-agent is cgo (NVML)
// and needs glibc. So bin/worker-agent is a link to this binary, which
// checks the image and then runs the real one, libexec/worker-agent.

// terminationLog is where a failure is written for the pod status: the
// launcher's default, or PODMPI_TERMINATION_LOG (the launcher's flag twin;
// worker-agent has no such flag).
func terminationLog() string {
	if p := os.Getenv("PODMPI_TERMINATION_LOG"); p != "" {
		return p
	}
	return "/dev/termination-log"
}

// writeTermination writes msg to path only when the file exists and is
// writable (Kubernetes creates it; nothing is created elsewhere).
func writeTermination(path, msg string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(msg)
	_ = f.Close()
}

// execReal replaces the process; tests replace it.
var execReal = syscall.Exec

// workerAgent is this binary started as worker-agent: check that the image
// can run the real worker-agent of this tree, then run it with the same
// arguments and environment. Every failure is one line on stderr and in
// the termination message, and exit code 75.
func workerAgent(args []string, stderr io.Writer) exitcode.Code {
	fail := func(err error) exitcode.Code {
		msg := "worker-agent: the image cannot run worker-agent: " + err.Error()
		fmt.Fprintln(stderr, msg)
		writeTermination(terminationLog(), fmt.Sprintf("%s\npodmpi worker-agent failed (exit code %d)\n", msg, exitcode.ImageUnsupported))
		return exitcode.ImageUnsupported
	}
	real, err := realWorkerAgent()
	if err != nil {
		return fail(err)
	}
	facts, err := imagecheck.Worker("/", real, os.Getenv)
	if err != nil {
		return fail(err)
	}
	if want := machine(runtime.GOARCH); want != elf.EM_NONE && facts.Machine != want {
		return fail(fmt.Errorf("%s is built for %s, and this node runs %s (this launcher's architecture); fix: use the binaries-only image of this node's architecture (it is multi-arch: pull it by its tag, not by a per-architecture digest)",
			real, facts.Machine, runtime.GOARCH))
	}
	err = execReal(real, args, os.Environ())
	return fail(fmt.Errorf("running %s: %w; fix: the folder must allow executing files (an emptyDir does; a volume mounted noexec does not)", real, err))
}

// realWorkerAgent is the real worker-agent of the tree this binary runs
// from, checked to be there and the tree complete.
func realWorkerAgent() (string, error) {
	root, err := layout.RunningRoot()
	if err != nil {
		return "", fmt.Errorf("%w; fix: run worker-agent from podmpi's tree (/opt/podmpi/bin/worker-agent)", err)
	}
	if why := layout.Incomplete(root); why != "" {
		return "", errors.New(why + "; fix: let the init container's `launcher install` finish (it is run again when restarted)")
	}
	real := layout.RealWorkerAgent(root)
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("the real worker-agent is not at %s: %s is not laid out as /opt/podmpi (bin/worker-agent links to the launcher, the real one is libexec/worker-agent); fix: copy the whole tree (launcher install <dir>, or COPY --from the binaries-only image /opt/podmpi)",
			real, root)
	}
	return real, nil
}

// machine is the ELF machine of a Go architecture, EM_NONE when unknown.
func machine(goarch string) elf.Machine {
	switch goarch {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	}
	return elf.EM_NONE
}

// launcherTreeCheck fails when the launcher runs from a podmpi tree that
// `launcher install` did not finish. A launcher outside any tree (go run,
// a copy alone) is not checked.
func launcherTreeCheck() error {
	root, err := layout.RunningRoot()
	if err != nil {
		return nil
	}
	if why := layout.Incomplete(root); why != "" {
		return errors.New(why + "; fix: let the init container's `launcher install` finish (it is run again when restarted)")
	}
	return nil
}

// newInstallCmd is `launcher install <dir>`: the binaries-only image's
// init container copies the tree this binary belongs to into dir, the
// emptyDir the launcher and worker containers mount at /opt/podmpi. The
// image has no shell and no cp, only this static binary.
func newInstallCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "install <dir>",
		Short: "Copy podmpi's tree (the folder above this binary's bin/) into <dir>, e.g. an emptyDir, for images without podmpi",
		Long: `install copies the tree this launcher belongs to (/opt/podmpi in the binaries-only
image) into <dir>: files with their modes, links as links. <dir> must be empty or
hold an earlier install (a restarted init container). A marker is written last:
a copy that stopped half way is refused by worker-agent and the launcher.

  initContainers:
  - name: podmpi
    image: ghcr.io/podmpi/podmpi:<version>
    command: [/opt/podmpi/bin/launcher, install, /podmpi]
    volumeMounts: [{name: podmpi, mountPath: /podmpi}]

Exit codes: 0 copied, 64 usage, 65 the folder is refused or the copy failed.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &launcher.UsageError{Err: fmt.Errorf("install takes one folder, e.g. launcher install /podmpi; got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := layout.RunningRoot()
			if err != nil {
				return installFailure(a, err)
			}
			dst, err := filepath.Abs(args[0])
			if err != nil {
				return installFailure(a, err)
			}
			st, err := layout.Install(root, dst)
			if err != nil {
				return installFailure(a, err)
			}
			fmt.Fprintf(a.stdout, "podmpi: installed %s into %s: %s\n", root, dst, st)
			return nil
		},
	}
}

// installFailure reports a failed install: run prints its line on stderr,
// and it goes into the termination message; exit 65.
func installFailure(a *app, err error) error {
	a.code = exitcode.Config
	writeTermination(terminationLog(), fmt.Sprintf("launcher install: %v\npodmpi launcher install failed (exit code %d)\n", err, exitcode.Config))
	return fmt.Errorf("install: %w", err)
}

// extendPath appends to the process's PATH the folders where the image has
// its MPI when PATH finds none (imagecheck.ExtendPath), so that the real
// mpirun after podmpi's own is found: a pod spec's PATH replaces the
// image's, which may have named them.
func extendPath(a *app) {
	self, _ := os.Executable()
	path, added := imagecheck.ExtendPath(os.Getenv("PATH"), os.Getenv, launcher.ShimNames, func(p string) bool {
		return self != "" && execpath.SameFile(p, self)
	})
	if len(added) == 0 {
		return
	}
	_ = os.Setenv("PATH", path)
	if a.cfg.Logger != nil {
		a.cfg.Logger.Info("no MPI launcher on PATH (a pod spec's PATH replaces the image's); adding the folders where the image has one",
			"added", strings.Join(added, ":"), "PATH", path)
	}
}
