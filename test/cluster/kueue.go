package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const kueueNS = "kueue-system"

// KueueFrameworks are the Kueue integrations the cluster turns on: the two
// job kinds podmpi's examples use. Only their webhooks (and Kueue's own) are
// registered, so that a pod or Deployment never waits on Kueue.
var KueueFrameworks = []string{"kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob"}

// kueueWebhookGroups are the API groups whose webhooks the cluster keeps.
var kueueWebhookGroups = map[string]bool{"kueue.x-k8s.io": true, "kubeflow.org": true, "trainer.kubeflow.org": true}

// EnsureKueue installs Kueue (its config/default manifests, minus the
// Deployment and the on-demand visibility APIService) and runs it on the
// host with live webhooks, like the other controllers.
func (c *Cluster) EnsureKueue(ctx context.Context) error {
	v := c.Pins.Kueue
	bin, err := c.B.Kueue(ctx, v)
	if err != nil {
		return err
	}
	dir := c.ctrlDir("kueue")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return err
	}
	if c.InstalledVersion("kueue") != v {
		mod, err := c.B.ModuleDir(ctx, KueueModule, v)
		if err != nil {
			return err
		}
		objs, err := c.render(ctx, filepath.Join(mod, "config", "default"))
		if err != nil {
			return err
		}
		hook := &hostWebhook{kueueNS, "kueue-webhook-service", map[string]int{"": KueueWebhookPort, "webhook": KueueWebhookPort, "webhook-server": KueueWebhookPort, "https": KueueWebhookPort}}
		if err := c.installRendered(ctx, "kueue", kueueObjects(objs), hook, "kueue-controller-manager"); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  port: %d
  host: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
manageJobsWithoutQueueName: false
integrations:
  frameworks: [%s]
`, kueueNS, KueueHealthPort, KueueMetricsPort, KueueWebhookPort, Gateway, `"`+strings.Join(KueueFrameworks, `", "`)+`"`)
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	p := c.controllerProc("kueue", bin, []string{
		"--config", filepath.Join(dir, "config.yaml"),
		"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--feature-gates", "VisibilityOnDemand=false",
		"--zap-log-level=2",
	}, fmt.Sprintf("http://127.0.0.1:%d/readyz", KueueHealthPort), kueueNS+"/kueue-webhook-server-cert")
	c.logf("== Kueue %s", v)
	if err := p.Start(ctx); err != nil {
		return err
	}
	if err := c.waitWebhook(ctx, "Kueue", kueueProbe); err != nil {
		return err
	}
	return c.setVersion("kueue", v)
}

// kueueObjects drops the on-demand visibility API (its APIService would make
// discovery, and so namespace deletion, wait on a server that does not run)
// and every webhook of an integration the cluster does not turn on.
func kueueObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "APIService" {
			continue
		}
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			var keep []any
			for _, h := range hooks {
				if webhookGroupsKept(h) {
					keep = append(keep, h)
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, keep, "webhooks")
		}
		out = append(out, o)
	}
	return out
}

// webhookGroupsKept reports whether every rule of a webhook is on a group
// the cluster's Kueue serves.
func webhookGroupsKept(h any) bool {
	m, _ := h.(map[string]any)
	rules, _ := m["rules"].([]any)
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		groups, _ := rm["apiGroups"].([]any)
		for _, g := range groups {
			if s, _ := g.(string); !kueueWebhookGroups[s] {
				return false
			}
		}
	}
	return true
}

// kueueProbe asks Kueue's validating webhook about a ResourceFlavor.
const kueueProbe = `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: podmpi-webhook-probe
`
