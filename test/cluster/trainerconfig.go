package cluster

import (
	"fmt"
	"strconv"
)

// TrainerConfigFlags reports whether Trainer release v takes its settings
// as flags (v2.0) rather than a Configuration file (v2.1 and later).
func TrainerConfigFlags(v string) bool { return Minor(v) == "0" }

// trainerCertNames are the names of the two certManagement fields of
// Trainer's Configuration in release v: the Service the certificate is
// made for, and the Secret that holds it.
//
// Up to v2.3 they are webhookServiceName and webhookSecretName. Trainer's
// change that renames them (kubeflow/trainer#3386, for v2.4: the
// certificate also serves the metrics and status servers) calls them
// serviceName and secretName, and Trainer decodes its Configuration
// strictly: a v2.4 controller refuses the old names at startup, a v2.3 one
// the new. The new names are the change's own; no v2.4 release could be
// read here (the Go module proxy refuses github.com/kubeflow/trainer/v2
// v2.4.0), so check them against the release's
// pkg/apis/config/v1alpha1/configuration_types.go before pinning it.
func trainerCertNames(v string) (service, secret string) {
	if m, err := strconv.Atoi(Minor(v)); err == nil && m >= 4 {
		return "serviceName", "secretName"
	}
	return "webhookServiceName", "webhookSecretName"
}

// trainerConfig is the Configuration file of Trainer release v (v2.1 and
// later) as this cluster runs it: health, metrics and the webhook on this
// host's ports, no leader election, Trainer's own certificate rotation for
// the Service and Secret its manifests name, the status server, and the
// TrainJob status API turned on where the release has it (TrainerStatus).
func trainerConfig(v string) string {
	service, secret := trainerCertNames(v)
	cfg := fmt.Sprintf(`apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:%d
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: 127.0.0.1:%d
  secureServing: false
webhook:
  port: %d
  host: %s
leaderElection:
  leaderElect: false
certManagement:
  enable: true
  %s: kubeflow-trainer-controller-manager
  %s: kubeflow-trainer-webhook-cert
statusServer:
  port: %d
`, TrainerHealthPort, TrainerMetricsPort, TrainerWebhookPort, Gateway, service, secret, TrainerStatusPort)
	if TrainerStatus(v) {
		// The TrainJob status API (alpha, off by default upstream) is on
		// in this cluster, as a Trainer that serves it would run it.
		cfg += "featureGates:\n  TrainJobStatus: true\n"
	}
	return cfg
}
