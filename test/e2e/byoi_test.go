package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// byoiWrapper is chrootWrapper for an image that does not carry podmpi:
// "ROOT WORK PODMPI cmd..." also mounts the folder PODMPI (the emptyDir
// the init container filled) at /opt/podmpi in the root, as the pod spec
// mounts it in the launcher and worker containers.
var byoiWrapper = strings.Replace(strings.Replace(chrootWrapper,
	"root=$1 work=$2\nshift 2\n", "root=$1 work=$2 podmpi=$3\nshift 3\n", 1),
	"exec chroot", `mount -t tmpfs -o mode=755 tmpfs "$root/opt"
mkdir "$root/opt/podmpi"
mount --bind "$podmpi" "$root/opt/podmpi"
exec chroot`, 1)

// manifestPath is the PATH the manifests give the launcher and worker
// containers of an image without podmpi: Kubernetes cannot append to the
// image's own, so it is written out whole, podmpi's folder first.
const manifestPath = "/opt/podmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TestBringYourOwnImage: podmpi rides into an image that has none of it
// (Debian trixie with Open MPI 5, no podmpi, no ssh): an "init container"
// runs `launcher install` into an emptyDir per pod, which every pod mounts
// at /opt/podmpi; the workers' command is /opt/podmpi/bin/worker-agent
// (the link that checks the image, then runs the real one), the
// launcher's the Kubeflow SDK's `mpirun --hostfile ... bash -c ...` with
// Trainer v2.4's variables under runLauncherAsNode, PATH as the manifests
// set it, and HOME=/ as a random UID gets it under a read-only root. Every
// rank, the launcher's too, writes $HOME/.horovod as horovodrun does.
func TestBringYourOwnImage(t *testing.T) {
	ctx := testCtx(t, 6*time.Minute)
	f := newFixture(t, "by", 2)
	o := setupOMPI5(t, ctx, f)
	wrapper := filepath.Join(work, "byoi-run")
	if err := os.WriteFile(wrapper, []byte(byoiWrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	// The binaries-only image's /opt/podmpi: static launcher and relay,
	// the real worker-agent (cgo) in libexec/, the links.
	tree := filepath.Join(work, "byoi-image", "opt", "podmpi")
	img, err := Build(ctx, mustModuleRoot(t), filepath.Join(tree, "bin"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := LinkNames(ctx, filepath.Join(tree, "bin")); err != nil {
		t.Fatal(err)
	}
	// The init container of each pod, as a random UID into its emptyDir.
	emptyDir := map[int]string{}
	for pod := range 3 {
		d := filepath.Join(work, "byoi-emptydir-"+f.c.Pod(pod).Hostname)
		if err := MakeDir(d); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		so, se, code, err := f.c.Run(ctx, pod, AnyUID, AnyGID, nil, img.Launcher, "install", d)
		if err != nil || code != 0 || !strings.HasPrefix(so, "podmpi: installed ") {
			t.Fatalf("launcher install %s: exit %d %v\n%s%s", d, code, err, so, se)
		}
		t.Logf("init container of %s: %s(%s wall, the process included)", f.c.Pod(pod).Hostname, strings.TrimPrefix(so, "podmpi: "), time.Since(start).Round(time.Millisecond))
		emptyDir[pod] = d
	}
	wrap := func(pod int) []string { return []string{wrapper, o.root, work, emptyDir[pod]} }

	startAgentsWith(t, ctx, f, Binaries{WorkerAgent: "/opt/podmpi/bin/worker-agent"}, func(pod int) AgentOptions {
		return AgentOptions{AuthDir: authDir, Home: "/", Slots: 1, Wrap: wrap(pod), Env: []string{"PATH=" + manifestPath}}
	}, 1, 2)

	hf := writeHostfile(t, f, "byoi", 1, 1, 2, 0) // runLauncherAsNode: the launcher last
	script := `mkdir -p "$HOME/.horovod" && test -w "$HOME/.horovod" && echo "byoi-rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname) home=$HOME"`
	run := f.runDir(t, "byoi")
	env := append([]string{"PATH=" + manifestPath, "HOME=/", "TMPDIR=" + run, "SHELL=/bin/sh",
		"PODMPI_SSH_AUTH_DIR=" + authDir, "PODMPI_LOG_FORMAT=text",
		"PODMPI_TERMINATION_LOG=" + filepath.Join(run, "termination-log"),
		"PODMPI_HOSTFILE_OUTPUT=" + filepath.Join(run, "hostfile"), "PODMPI_MPIRUN_TIMEOUT=60s"},
		append(ShareEnv(), append(TrainerLauncherEnv(hf, 1), TrainerPRTEEnv(hf, 1)...)...)...)
	argv := append(wrap(0)[1:], "mpirun", "--hostfile", hf, "bash", "-c", script)
	start := time.Now()
	p, err := f.c.Start(ctx, 0, -1, -1, env, filepath.Join(f.c.LogDir(), "byoi-launcher.log"), wrapper, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	r := wait(t, p, start, 90*time.Second)
	mustSucceed(t, r)
	rank := regexp.MustCompile(`(?m)^byoi-rank (\d) of 3 on (\S+) home=(\S+)$`)
	hosts := map[string]string{}
	for _, m := range rank.FindAllStringSubmatch(r.out, -1) {
		hosts[m[2]] = m[3]
	}
	for _, h := range []string{"by-node-0-0", "by-node-0-1", "by-launcher-0-0"} {
		if home := hosts[h]; home == "" || home == "/" {
			t.Errorf("%s: no rank wrote its $HOME/.horovod (home %q); output:\n%s", h, home, r.out)
		}
	}
	for _, want := range []string{"implementation=openmpi5", "/usr/bin/prted",
		"giving mpirun and what it starts a private one\" component=launcher old=/ HOME="} {
		if !strings.Contains(r.out, want) {
			t.Errorf("launcher output lacks %q", want)
		}
	}
	for pod, a := range f.agents {
		b, _ := os.ReadFile(a.Log)
		if !strings.Contains(string(b), `"msg":"HOME is unset or not writable`) || !strings.Contains(string(b), `"old":"/"`) {
			t.Errorf("worker-agent of pod %d does not say it gave its sessions a HOME:\n%s", pod, tailBytes(b, 2000))
		}
	}
	t.Logf("the job in the image without podmpi: %s, ranks %v", r.took.Round(time.Millisecond), hosts)
	f.noLeftovers(t, 5*time.Second)
}
