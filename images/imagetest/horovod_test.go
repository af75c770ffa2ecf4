package imagetest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// horovodrun keeps its host checks in $HOME/.horovod: a writable home,
	// as the example runtimes mount an emptyDir there (mounted before the
	// Secret inside it).
	p := startContainerPods(ctx, t, pm, "hv", imagePrefix()+"/horovod:latest",
		"--mount", "type=tmpfs,destination=/home/mpiuser,tmpfs-mode=1777")
	var hosts []string
	for _, n := range p.shortNames() {
		hosts = append(hosts, n+":1")
	}
	out := p.runLauncher(ctx, nil, "horovodrun", "-np", "3", "-H", strings.Join(hosts, ","), "-p", "2222",
		"python3", "/usr/local/share/podmpi/horovod_allreduce.py")
	ranks := regexp.MustCompile(`(?m)rank (\d)/3 on (\S+): allreduce=6 \(expect 6\) ok$`).FindAllStringSubmatch(out, -1)
	on := map[string]bool{}
	for _, m := range ranks {
		on[m[2]] = true
	}
	for _, i := range p.c.Workers() {
		if !on[p.c.Pod(i).Hostname] {
			t.Errorf("no Horovod rank reported from %s (%d rank lines: %v)", p.c.Pod(i).Hostname, len(ranks), on)
		}
	}
	if !strings.Contains(out, "podmpi-horovod-check: OK") {
		t.Errorf("launcher output lacks %q", "podmpi-horovod-check: OK")
	}
}
