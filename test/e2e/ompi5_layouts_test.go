package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TrainerPRTEEnv are the four values Kubeflow Trainer v2.4's MPI plugin
// sets in the launcher for Open MPI 5 (PRRTE), beside the ORTE four of
// TrainerLauncherEnv. keep_fqdn_hostnames is false on purpose there: with
// true and runLauncherAsNode, PRRTE takes the launcher's own hostfile entry
// for a remote host and starts a daemon there over ssh.
func TrainerPRTEEnv(hostfile string, slotsPerNode int) []string {
	return []string{
		"PRTE_MCA_prte_default_hostfile=" + hostfile,
		"PRTE_MCA_prte_keep_fqdn_hostnames=false",
		fmt.Sprintf("PRTE_MCA_prte_set_default_slots=%d", slotsPerNode),
		"PRTE_MCA_plm_ssh_args=-o ConnectionAttempts=10",
	}
}

// TestOpenMPI5TrainerLayouts runs Open MPI 5 (PRRTE) under Trainer's two
// layouts, the launcher's own entry last in the hostfile
// (runLauncherAsNode: it runs ranks too) or absent, each with Trainer
// v2.4's four PRTE values and without them (Trainer before 2.4 and
// mpi-operator set the ORTE ones only), with the command the Kubeflow SDK
// gives the launcher: podmpi's mpirun, `mpirun --hostfile <hostfile> prog`.
// Every job must finish with every rank on the host the hostfile gives it:
// no daemon started over ssh on the launcher's own pod, no short name
// handed to ssh that does not resolve, no rank lost to a run on one node.
func TestOpenMPI5TrainerLayouts(t *testing.T) {
	ctx := testCtx(t, 8*time.Minute)
	f := newFixture(t, "l5", 2)
	o := setupOMPI5(t, ctx, f)
	f.startTrixieAgents(t, ctx, o.bin, o.wrap, AgentOptions{Slots: 2, Env: []string{"PATH=" + o.path}}, 1, 2)
	type variant struct {
		name string
		env  func(hostfile string) []string
	}
	variants := []variant{
		{"trainer-v2.4", func(hf string) []string { return append(TrainerLauncherEnv(hf, 2), TrainerPRTEEnv(hf, 2)...) }},
		// Trainer before v2.4 and mpi-operator v0.8.2 set the ORTE four
		// only, which Open MPI 5 does not read but for the hostfile.
		{"orte-only", func(hf string) []string { return TrainerLauncherEnv(hf, 2) }},
		// A hand-written pod: podmpi's own values alone.
		{"no-operator-values", func(string) []string { return nil }},
	}
	for _, asNode := range []bool{true, false} {
		vs := variants
		if asNode {
			// Whole-name comparison forced by the user: the launcher
			// writes its own entry as its host name.
			vs = append(vs, variant{"keep-fqdn-forced", func(hf string) []string {
				return append(TrainerLauncherEnv(hf, 2), "PRTE_MCA_prte_keep_fqdn_hostnames=true")
			}})
		}
		layout := "workers-only"
		if asNode {
			layout = "launcher-as-node"
		}
		for _, v := range vs {
			t.Run(layout+"/"+v.name, func(t *testing.T) {
				pods := []int{1, 2}
				want := map[string]int{"l5-node-0-0": 2, "l5-node-0-1": 2}
				if asNode {
					pods = append(pods, 0) // Trainer lists the launcher last
					want["l5-launcher-0-0"] = 2
				}
				hf := writeHostfile(t, f, layout+"-"+v.name, 2, pods...)
				run := f.runDir(t, "l5")
				env := append([]string{"PATH=" + o.path, "HOME=" + run, "TMPDIR=" + run, "SHELL=/bin/sh",
					"PODMPI_SSH_AUTH_DIR=" + authDir, "PODMPI_LOG_FORMAT=text",
					"PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
					"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"), "PODMPI_MPIRUN_TIMEOUT=60s"},
					append(ShareEnv(), v.env(hf)...)...)
				argv := append(append([]string{}, o.wrap[1:]...), "mpirun", "--hostfile", hf, o.prog)
				start := time.Now()
				p, err := f.c.Start(ctx, 0, -1, -1, env, filepath.Join(f.c.LogDir(), "l5-"+layout+"-"+v.name+".log"), o.wrap[0], argv...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Stop() })
				r := wait(t, p, start, 100*time.Second)
				mustSucceed(t, r)
				np := 0
				for _, n := range want {
					np += n
				}
				checkAllreduce(t, r, np, want)
				for _, bad := range []string{"implementation=openmpi4", "l5-launcher-0-0.l5:2222", "podmpi-rsh: "} {
					if strings.Contains(r.out, bad) {
						t.Errorf("output has %q: no ssh to the launcher's own pod may be tried; output:\n%s", bad, r.out)
					}
				}
				if r.took > 30*time.Second {
					t.Errorf("took %s: something was waited for", r.took)
				}
			})
		}
	}
	// A hostfile the launcher did not write, with the launcher's own
	// entry as Trainer writes it and PRRTE comparing whole names: PRRTE
	// asks podmpi-rsh for a daemon on the launcher's own pod. podmpi-rsh
	// ends that at once and the diagnosis names the launcher's pod, where
	// before it waited PODMPI_SSH_WAIT (2 minutes) for a connection
	// refused.
	t.Run("launcher-as-node/own-entry-over-ssh-is-named", func(t *testing.T) {
		read := writeHostfile(t, f, "read", 2, 1, 2, 0)
		given := writeHostfile(t, f, "given", 2, 1, 2, 0)
		run := f.runDir(t, "l5")
		env := append([]string{"PATH=" + o.path, "HOME=" + run, "TMPDIR=" + run, "SHELL=/bin/sh",
			"PODMPI_SSH_AUTH_DIR=" + authDir, "PODMPI_LOG_FORMAT=text", "PODMPI_HOSTFILE=" + read,
			"PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
			"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"), "PODMPI_MPIRUN_TIMEOUT=100s",
			"PRTE_MCA_prte_keep_fqdn_hostnames=true"}, ShareEnv()...)
		argv := append(append([]string{}, o.wrap[1:]...), "mpirun", "--hostfile", given, "-np", "6", o.prog)
		start := time.Now()
		p, err := f.c.Start(ctx, 0, -1, -1, env, filepath.Join(f.c.LogDir(), "l5-own-entry.log"), o.wrap[0], argv...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop() })
		r := wait(t, p, start, 110*time.Second)
		if r.code == 0 {
			t.Fatalf("the job ran with a daemon on the launcher's own pod; output:\n%s", r.out)
		}
		if r.took > 30*time.Second {
			t.Errorf("took %s: the launcher's own pod was waited for", r.took.Round(time.Second))
		}
		term, _ := os.ReadFile(filepath.Join(run, "termination-log"))
		for _, want := range []string{"l5-launcher-0-0.l5:2222: not-worker-agent: ", "the launcher's own pod"} {
			if !strings.Contains(string(term), want) {
				t.Errorf("termination message lacks %q:\n%s\noutput:\n%s", want, term, r.out)
			}
		}
		t.Logf("named in %s: %s", r.took.Round(time.Millisecond), strings.SplitN(string(term), "\n", 2)[0])
	})
	t.Run("no_leftovers", func(t *testing.T) {
		f.noLeftovers(t, 5*time.Second)
	})
}

// ompi5 is what a test with Debian trixie's Open MPI 5 needs beside
// trixieSetup's binaries and wrapper: the PATH with the static bin dir
// first (the wrapper needs chroot from sbin) and the allreduce compiled
// with the root's mpicc.
type ompi5 struct {
	root string
	bin  Binaries
	wrap []string // wrapper, root, work: run a command chrooted as AnyUID
	path string
	prog string
}

// setupOMPI5 skips t when the trixie root is missing (make e2e-ompi5
// builds it), and else builds the static binaries (trixieSetup) and
// compiles the allreduce in the root, in pod 0 of f.
func setupOMPI5(t *testing.T, ctx context.Context, f *fixture) ompi5 {
	t.Helper()
	root := trixieRoot()
	if _, err := os.Stat(filepath.Join(root, "usr/bin/prted")); err != nil {
		t.Skipf("Open MPI 5: no trixie root in %s (make e2e-ompi5 builds it)", root)
	}
	o := ompi5{root: root}
	o.bin, o.wrap = trixieSetup(t, ctx)
	o.path = filepath.Dir(o.bin.Launcher) + ":/usr/sbin:/usr/bin:/sbin:/bin"
	out := filepath.Join(work, "ompi5-"+f.job)
	if err := MakeDir(out); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/allreduce.c")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "allreduce.c"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	o.prog = filepath.Join(out, "allreduce-ompi5")
	so, se, code, err := f.c.Run(ctx, 0, -1, -1, []string{"HOME=" + out}, o.wrap[0], root, work, "mpicc.openmpi", "-O2", "-o", o.prog, filepath.Join(out, "allreduce.c"))
	if err != nil || code != 0 {
		t.Fatalf("mpicc.openmpi in the trixie root: exit %d %v\n%s%s", code, err, so, se)
	}
	return o
}

// startAgentsWith starts bin's worker-agent with the options opts gives
// each of pods, and waits until all of f's agents are ready.
func startAgentsWith(t *testing.T, ctx context.Context, f *fixture, bin Binaries, opts func(pod int) AgentOptions, pods ...int) {
	t.Helper()
	for _, pod := range pods {
		p, err := StartAgent(context.Background(), f.c, pod, bin, opts(pod))
		if err != nil {
			t.Fatal(err)
		}
		f.agents[pod] = p
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitReady(rctx, f.c, f.agents); err != nil {
		t.Fatal(err)
	}
}
