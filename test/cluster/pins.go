package cluster

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed versions.txt
var versionsTxt string

// Pins are the versions in versions.txt. For trainer and mpi-operator the
// first line is the default.
type Pins struct {
	Kubernetes  string
	CoreDNS     string
	Trainer     []string
	JobSet      []string
	MPIOperator []string
	Kueue       string
	KubeRouter  string
	// Helm is the helm the chart is tested with, Registry the OCI
	// registry (CNCF distribution) releases are pushed to: both built
	// from the module proxy.
	Helm     string
	Registry string
	// Oras attaches the SBOMs in make release (scripts/release.sh reads
	// its line).
	Oras   string
	Debian map[string]string // etcd, containerd, cni-plugins, docker-compose: the Debian major.minor
	Why    map[string]string // "component version" -> why
}

// LoadPins parses versions.txt (embedded).
func LoadPins() (Pins, error) { return parsePins(versionsTxt) }

func parsePins(text string) (Pins, error) {
	p := Pins{Debian: map[string]string{}, Why: map[string]string{}}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return Pins{}, fmt.Errorf("versions.txt:%d: want \"component version why\", got %q", n+1, line)
		}
		name, v := f[0], f[1]
		p.Why[name+" "+v] = strings.Join(f[2:], " ")
		switch name {
		case "kubernetes":
			p.Kubernetes = v
		case "coredns":
			p.CoreDNS = v
		case "trainer":
			p.Trainer = append(p.Trainer, v)
		case "jobset":
			p.JobSet = append(p.JobSet, v)
		case "mpi-operator":
			p.MPIOperator = append(p.MPIOperator, v)
		case "kueue":
			p.Kueue = v
		case "kube-router":
			p.KubeRouter = v
		case "helm":
			p.Helm = v
		case "registry":
			p.Registry = v
		case "oras":
			p.Oras = v
		case "etcd", "containerd", "cni-plugins", "docker-compose":
			p.Debian[name] = v
		default:
			return Pins{}, fmt.Errorf("versions.txt:%d: unknown component %q", n+1, name)
		}
	}
	if p.Kubernetes == "" || p.CoreDNS == "" || len(p.Trainer) == 0 || len(p.MPIOperator) == 0 || p.Kueue == "" || p.KubeRouter == "" || p.Helm == "" || p.Registry == "" || p.Oras == "" {
		return Pins{}, fmt.Errorf("versions.txt: need kubernetes, coredns, trainer, mpi-operator, kueue, kube-router, helm, registry and oras lines")
	}
	for _, v := range append(append([]string{p.Kubernetes, p.CoreDNS, p.Kueue, p.KubeRouter, p.Helm, p.Registry, p.Oras}, p.Trainer...), append(p.JobSet, p.MPIOperator...)...) {
		if !strings.HasPrefix(v, "v") || strings.Count(v, ".") != 2 {
			return Pins{}, fmt.Errorf("versions.txt: %q is not a module version like v1.2.3", v)
		}
	}
	return p, nil
}

// Minor is "36" for "v1.36.3".
func Minor(v string) string {
	f := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// CheckTrainer returns an error unless v is a pinned Trainer version.
func (p Pins) CheckTrainer(v string) error {
	if !slices.Contains(p.Trainer, v) {
		return fmt.Errorf("Trainer %s is not pinned in test/cluster/versions.txt (pinned: %s)", v, strings.Join(p.Trainer, ", "))
	}
	return nil
}

// CheckMPIOperator returns an error unless v is a pinned mpi-operator version.
func (p Pins) CheckMPIOperator(v string) error {
	if !slices.Contains(p.MPIOperator, v) {
		return fmt.Errorf("mpi-operator %s is not pinned in test/cluster/versions.txt (pinned: %s)", v, strings.Join(p.MPIOperator, ", "))
	}
	return nil
}
