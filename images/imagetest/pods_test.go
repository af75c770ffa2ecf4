package imagetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/test/harness"
)

// containerPods is one job as its pods run it: a launcher pod and three
// worker pods of test/harness (cluster DNS; Trainer's names
// <job>-launcher-0-0 and <job>-node-0-<i>), a podman container in each,
// hardened, sharing one job key; the workers run worker-agent. Every
// container is removed by name when the test ends.
type containerPods struct {
	t       *testing.T
	pm      podman
	c       *harness.Cluster
	image   string
	extra   []string // podman run options of every container, before hardened's
	authDir string
	names   string // container name prefix
	started []string
}

// startContainerPods starts the pods and the worker containers of image,
// each with the podman run options extra.
func startContainerPods(ctx context.Context, t *testing.T, pm podman, job, image string, extra ...string) *containerPods {
	t.Helper()
	if out, err := pm.run(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		t.Fatalf("image %s is missing (run images/build.sh): %v\n%s", image, err, out)
	}
	pods := []harness.PodSpec{{Hostname: job + "-launcher-0-0", Role: harness.RoleLauncher, Publish: true}}
	for _, w := range []string{"0", "1", "2"} {
		pods = append(pods, harness.PodSpec{Hostname: job + "-node-0-" + w, Publish: true})
	}
	p := &containerPods{t: t, pm: pm, image: image, extra: extra, authDir: writeAuthDir(t)}
	p.c = harness.StartT(t, harness.Config{Job: job, Pods: pods})
	p.names = "podmpi-it-" + p.c.ID() + "-" + job + "-"
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer ccancel()
		for _, n := range p.started {
			if out, err := pm.run(cctx, "rm", "--force", "--time", "5", n); err != nil {
				t.Errorf("removing container %s: %v\n%s", n, err, out)
			}
		}
	})
	for _, i := range p.c.Workers() {
		wp := p.c.Pod(i)
		n := p.names + wp.Hostname
		args := append([]string{"run", "--detach", "--name", n}, pm.ulimits...)
		args = append(args, extra...)
		args = append(args, hardened(wp.NetNS, wp.Hostname, p.authDir)...)
		args = append(args, image, "worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022")
		p.started = append(p.started, n)
		if out, err := pm.run(ctx, args...); err != nil {
			t.Fatalf("starting worker %s: %v\n%s", n, err, out)
		}
	}
	return p
}

// shortNames are the workers' names as Trainer writes them into the
// hostfile: <pod>.<job>.
func (p *containerPods) shortNames() []string {
	var names []string
	for _, i := range p.c.Workers() {
		names = append(names, p.c.Pod(i).ShortName)
	}
	return names
}

// runLauncher runs command in the launcher pod's container (podman run
// options opts after the hardened ones) and returns its output; a failure
// fails the test with every worker's log.
func (p *containerPods) runLauncher(ctx context.Context, opts []string, command ...string) string {
	p.t.Helper()
	lp := p.c.Pod(0)
	ln := p.names + "launcher"
	args := append([]string{"run", "--name", ln}, p.pm.ulimits...)
	args = append(args, p.extra...)
	args = append(args, hardened(lp.NetNS, lp.Hostname, p.authDir)...)
	args = append(args, opts...)
	args = append(append(args, p.image), command...)
	p.started = append(p.started, ln)
	start := time.Now()
	out, err := p.pm.run(ctx, args...)
	p.t.Logf("podman %s\n(%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	if err != nil {
		for _, i := range p.c.Workers() {
			if logs, lerr := p.pm.run(context.Background(), "logs", p.names+p.c.Pod(i).Hostname); lerr == nil {
				p.t.Logf("worker %s log:\n%s", p.c.Pod(i).Hostname, logs)
			}
		}
		p.t.Fatalf("launcher container: %v", err)
	}
	return out
}
