package imagetest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// TestHorovodAcrossContainers runs horovodrun as its documentation writes
// it, with no "launcher --" and no operator variable, in the Horovod image:
// `horovodrun -np 3 -H hv-node-0-0.hv:1,... -p 2222 python3
// /usr/local/share/podmpi/horovod_allreduce.py` in a hardened launcher
// container, three hardened worker containers running worker-agent. The
// image's ssh (podmpi's) carries horovodrun's pre-flight and task-server
// lines, its mpirun (podmpi's) runs Open MPI's with the -H names kept whole,
// and every rank allreduces and trains with Debian's PyTorch.
func TestHorovodAcrossContainers(t *testing.T) {
	if os.Getenv("PODMPI_IMAGE_TEST") != "1" {
		t.Skip("set PODMPI_IMAGE_TEST=1 (make image-test builds the images and does): runs horovodrun across podman containers")
	}
	pm := newPodman(t)
	image := imagePrefix() + "/horovod:latest"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := pm.run(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		t.Fatalf("image %s is missing (run images/build.sh horovod): %v\n%s", image, err, out)
	}
	c := harness.StartT(t, harness.Config{
		Job: "hv",
		Pods: []harness.PodSpec{
			{Hostname: "hv-launcher-0-0", Role: harness.RoleLauncher, Publish: true},
			{Hostname: "hv-node-0-0", Publish: true},
			{Hostname: "hv-node-0-1", Publish: true},
			{Hostname: "hv-node-0-2", Publish: true},
		},
	})
	authDir := writeAuthDir(t)
	name := func(role string) string { return "podmpi-it-" + c.ID() + "-hvd-" + role }
	var started []string
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer ccancel()
		for _, n := range started {
			if out, err := pm.run(cctx, "rm", "--force", "--time", "5", n); err != nil {
				t.Errorf("removing container %s: %v\n%s", n, err, out)
			}
		}
	})

	// horovodrun keeps its host checks in $HOME/.horovod: a writable home,
	// as the example runtimes mount an emptyDir there (mounted before the
	// Secret inside it).
	home := []string{"--mount", "type=tmpfs,destination=/home/mpiuser,tmpfs-mode=1777"}

	var hosts []string
	for _, i := range c.Workers() {
		p := c.Pod(i)
		n := name(p.Hostname)
		args := append([]string{"run", "--detach", "--name", n}, pm.ulimits...)
		args = append(args, home...)
		args = append(args, hardened(p.NetNS, p.Hostname, authDir)...)
		args = append(args, image, "worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022")
		started = append(started, n)
		if out, err := pm.run(ctx, args...); err != nil {
			t.Fatalf("starting worker %s: %v\n%s", n, err, out)
		}
		hosts = append(hosts, p.ShortName+":1")
	}

	lp := c.Pod(0)
	ln := name("launcher")
	args := append([]string{"run", "--name", ln}, pm.ulimits...)
	args = append(args, home...)
	args = append(args, hardened(lp.NetNS, lp.Hostname, authDir)...)
	args = append(args, image, "horovodrun", "-np", "3", "-H", strings.Join(hosts, ","), "-p", "2222",
		"python3", "/usr/local/share/podmpi/horovod_allreduce.py")
	started = append(started, ln)
	start := time.Now()
	out, err := pm.run(ctx, args...)
	t.Logf("podman %s\n(%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	if err != nil {
		for _, i := range c.Workers() {
			if logs, lerr := pm.run(context.Background(), "logs", name(c.Pod(i).Hostname)); lerr == nil {
				t.Logf("worker %s log:\n%s", c.Pod(i).Hostname, logs)
			}
		}
		t.Fatalf("launcher container: %v", err)
	}
	ranks := regexp.MustCompile(`(?m)rank (\d)/3 on (\S+): allreduce=6 \(expect 6\) ok$`).FindAllStringSubmatch(out, -1)
	on := map[string]bool{}
	for _, m := range ranks {
		on[m[2]] = true
	}
	for _, i := range c.Workers() {
		if !on[c.Pod(i).Hostname] {
			t.Errorf("no Horovod rank reported from %s (%d rank lines: %v)", c.Pod(i).Hostname, len(ranks), on)
		}
	}
	if !strings.Contains(out, "podmpi-horovod-check: OK") {
		t.Errorf("launcher output lacks %q", "podmpi-horovod-check: OK")
	}
}
