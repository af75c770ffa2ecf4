package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// trixieRoot is the cached Debian trixie root with Open MPI 5.0 (PRRTE)
// that scripts/trixie-rootfs.sh builds.
func trixieRoot() string {
	if d := os.Getenv("PODMPI_TRIXIE_ROOTFS"); d != "" {
		return d
	}
	return "/var/cache/podmpi/trixie-rootfs"
}

// chrootWrapper runs "ROOT WORK cmd..." inside ROOT as AnyUID:AnyGID. It
// runs in the private mount namespace `ip netns exec` gives every pod
// command, so its bind mounts (the pod's /etc files, /dev, /proc, /sys,
// /tmp and the test's work dir) vanish with the process and no two pods
// see each other's.
const chrootWrapper = `#!/bin/sh
set -e
root=$1 work=$2
shift 2
for f in resolv.conf hosts hostname; do
	[ -f "$root/etc/$f" ] || : >"$root/etc/$f"
	mount --bind "/etc/$f" "$root/etc/$f"
done
mount --rbind /dev "$root/dev"
mount --rbind /proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /tmp "$root/tmp"
if [ ! -d "$root$work" ]; then
	mkdir -p "$root$work"
	mount --bind "$work" "$root$work"
fi
exec chroot "$root" /usr/bin/setpriv --reuid=1000680000 --regid=0 --clear-groups --inh-caps=-all -- "$@"
`

// TestOpenMPI5 runs the allreduce with Debian trixie's Open MPI 5 (PRRTE:
// prted instead of orted, PRTE_MCA_* names), the launcher and every
// worker-agent chrooted into the trixie root inside their pods. It needs the
// cached root (make e2e-ompi5 / scripts/trixie-rootfs.sh); with
// PODMPI_E2E_OMPI5=1 it builds the root itself (minutes).
func TestOpenMPI5(t *testing.T) {
	root := trixieRoot()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/prted")); err != nil {
		if os.Getenv("PODMPI_E2E_OMPI5") != "1" {
			t.Skipf("Open MPI 5: no trixie root in %s (make e2e-ompi5 builds it, or set PODMPI_E2E_OMPI5=1)", root)
		}
		bctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
		defer cancel()
		modRoot, err := ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(bctx, filepath.Join(modRoot, "scripts/trixie-rootfs.sh"))
		cmd.Env = append(os.Environ(), "PODMPI_TRIXIE_ROOTFS="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the trixie root: %v\n%s", err, out)
		}
	}
	ctx := testCtx(t, 5*time.Minute)
	sbin, wrap := trixieSetup(t, ctx)
	wrapper := wrap[0]

	f := newFixture(t, "o5", 3)

	// Compile the allreduce with trixie's mpicc, inside the root.
	out5 := filepath.Join(work, "ompi5")
	if err := MakeDir(out5); err != nil {
		t.Fatal(err)
	}
	src, _ := filepath.Abs("testdata/allreduce.c")
	srcCopy := filepath.Join(out5, "allreduce.c")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srcCopy, b, 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(out5, "allreduce-ompi5")
	o, e, code, err := f.c.Run(ctx, 0, -1, -1, []string{"HOME=" + out5}, wrapper, root, work, "mpicc.openmpi", "-O2", "-o", prog, srcCopy)
	if err != nil || code != 0 {
		t.Fatalf("mpicc.openmpi in the trixie root: exit %d %v\n%s%s", code, err, o, e)
	}
	o, e, _, _ = f.c.Run(ctx, 0, -1, -1, []string{"HOME=" + out5}, wrapper, root, work, "mpirun", "--version")
	t.Logf("trixie root: %s", strings.SplitN(strings.TrimSpace(o+e), "\n", 2)[0])

	f.startTrixieAgents(t, ctx, sbin, wrap, AgentOptions{}, 1, 2, 3)

	run := filepath.Join(work, "run-o5")
	start := time.Now()
	p, err := StartLauncher(ctx, f.c, 0, sbin, LauncherOptions{
		AuthDir: authDir, RunDir: run, Wrap: wrap,
		Flags:   []string{"--discovery.service", "o5", "--workers-expected", "3", "--mpirun.timeout", "90s"},
		Command: []string{"mpirun", prog},
		Log:     filepath.Join(f.c.LogDir(), "launcher-o5.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	r := wait(t, p, start, 120*time.Second)
	mustSucceed(t, r)
	checkAllreduce(t, r, 6, map[string]int{"o5-node-0-0": 2, "o5-node-0-1": 2, "o5-node-0-2": 2})
	if !strings.Contains(r.out, "/usr/bin/prted") {
		t.Errorf("the probe table does not show prted (Open MPI 5 detected?); output:\n%s", r.out)
	}
	f.noLeftovers(t, 5*time.Second)
}

// trixieSetup builds the launcher and worker-agent static (the trixie root
// has its own libc) into work/static, laid out as make build lays out bin/
// (the links too), and writes the chroot wrapper: the
// binaries to run in the root, and the Wrap that runs them there.
func trixieSetup(t *testing.T, ctx context.Context) (Binaries, []string) {
	t.Helper()
	static := filepath.Join(work, "static", "bin") // the real worker-agent in static/libexec
	sbin, err := Build(ctx, mustModuleRoot(t), static, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(static), static, filepath.Dir(sbin.WorkerAgent)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := LinkNames(ctx, static); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(work, "chroot-run")
	if err := os.WriteFile(wrapper, []byte(chrootWrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return sbin, []string{wrapper, trixieRoot(), work}
}

// startTrixieAgents (re)starts the worker-agent of each pod chrooted into
// the trixie root (sbin, wrap: trixieSetup) with o, a home of its own
// unless o names one, and waits until they are ready.
func (f *fixture) startTrixieAgents(t *testing.T, ctx context.Context, sbin Binaries, wrap []string, o AgentOptions, pods ...int) {
	t.Helper()
	o.AuthDir, o.Wrap = authDir, wrap
	started := map[int]*harness.Proc{}
	for _, pod := range pods {
		f.stopAgent(t, pod)
		po := o
		if po.Home == "" {
			po.Home = filepath.Join(work, "home5-"+f.c.Pod(pod).Hostname)
		}
		if err := MakeDir(po.Home); err != nil {
			t.Fatal(err)
		}
		p, err := StartAgent(context.Background(), f.c, pod, sbin, po)
		if err != nil {
			t.Fatal(err)
		}
		f.agents[pod], started[pod] = p, p
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitReady(rctx, f.c, started); err != nil {
		t.Fatal(err)
	}
}

func mustModuleRoot(t *testing.T) string {
	t.Helper()
	r, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
