package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestTrainerConfigPerVersion: the Configuration written for each Trainer
// release names certManagement's fields as that release decodes them
// (strictly: a wrong name stops the controller at startup): the webhook*
// names up to v2.3, serviceName and secretName from v2.4 on
// (kubeflow/trainer#3386); v2.0 takes flags.
func TestTrainerConfigPerVersion(t *testing.T) {
	p, err := LoadPins()
	if err != nil {
		t.Fatal(err)
	}
	if !TrainerConfigFlags("v2.0.0") || TrainerConfigFlags("v2.3.0") || TrainerConfigFlags("v2.4.0") {
		t.Errorf("flags: v2.0 takes flags, v2.1 and later a Configuration")
	}
	want := map[string][]string{
		"v2.1.0": {"enable", "webhookSecretName", "webhookServiceName"},
		"v2.3.0": {"enable", "webhookSecretName", "webhookServiceName"},
		"v2.4.0": {"enable", "secretName", "serviceName"},
		"v2.5.1": {"enable", "secretName", "serviceName"},
	}
	for _, v := range p.Trainer {
		if !TrainerConfigFlags(v) {
			if _, ok := want[v]; !ok {
				t.Errorf("pinned Trainer %s: add it to this test's table", v)
			}
		}
	}
	for v, keys := range want {
		var cfg struct {
			Kind           string         `json:"kind"`
			CertManagement map[string]any `json:"certManagement"`
			FeatureGates   map[string]any `json:"featureGates"`
		}
		if err := yaml.Unmarshal([]byte(trainerConfig(v)), &cfg); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var got []string
		for k := range cfg.CertManagement {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Errorf("Trainer %s: certManagement fields %v, want %v", v, got, keys)
		}
		if cfg.CertManagement["enable"] != true {
			t.Errorf("Trainer %s: certManagement.enable %v, want true (Trainer's own rotator makes the certificate)", v, cfg.CertManagement["enable"])
		}
		if (cfg.FeatureGates["TrainJobStatus"] == true) != TrainerStatus(v) {
			t.Errorf("Trainer %s: featureGates %v, want TrainJobStatus exactly where the release has the status API", v, cfg.FeatureGates)
		}
	}
}

// TestTrainerConfigMatchesRelease: where the Go module cache holds a
// pinned Trainer's source (make cluster-up downloads it), every
// certManagement field written for it is a field of that release's
// CertManagement type.
func TestTrainerConfigMatchesRelease(t *testing.T) {
	p, err := LoadPins()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	modcache := strings.TrimSpace(string(out))
	checked := 0
	for _, v := range p.Trainer {
		if TrainerConfigFlags(v) {
			continue
		}
		src := filepath.Join(modcache, "github.com", "kubeflow", "trainer", "v2@"+v, "pkg", "apis", "config", "v1alpha1", "configuration_types.go")
		b, err := os.ReadFile(src)
		if err != nil {
			t.Logf("Trainer %s: no source in the module cache (%v): not checked", v, err)
			continue
		}
		typ := regexp.MustCompile(`(?s)type CertManagement struct \{(.*?)\n\}`).FindSubmatch(b)
		if typ == nil {
			t.Fatalf("%s: no CertManagement type", src)
		}
		fields := map[string]bool{}
		for _, m := range regexp.MustCompile(`json:"([A-Za-z]+)`).FindAllSubmatch(typ[1], -1) {
			fields[string(m[1])] = true
		}
		var cfg struct {
			CertManagement map[string]any `json:"certManagement"`
		}
		if err := yaml.Unmarshal([]byte(trainerConfig(v)), &cfg); err != nil {
			t.Fatal(err)
		}
		for k := range cfg.CertManagement {
			if !fields[k] {
				t.Errorf("Trainer %s: certManagement.%s is not a field of the release's CertManagement (%v)", v, k, fields)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Skip("no pinned Trainer's source in the module cache (make cluster-up downloads it)")
	}
}
