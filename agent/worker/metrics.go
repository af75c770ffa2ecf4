package worker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podmpi/podmpi/agent/version"
)

// Namespace and subsystem of the worker's own metrics (podmpi_worker_*).
const (
	MetricNamespace = "podmpi"
	MetricSubsystem = "worker"
)

type metrics struct {
	gpus  prometheus.Gauge
	slots prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, v version.Info, ready func() float64) (*metrics, error) {
	m := &metrics{
		gpus: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricNamespace, Subsystem: MetricSubsystem, Name: "gpus",
			Help: "Number of GPUs (or MIG devices) this worker may use; 0 until GPU detection has finished.",
		}),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricNamespace, Subsystem: MetricSubsystem, Name: "slots",
			Help: "Number of MPI slots this worker offers; 0 until GPU detection has finished.",
		}),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: MetricNamespace, Subsystem: MetricSubsystem, Name: "build_info",
		Help: "A metric with a constant '1' value labelled by the worker-agent's version, commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	buildInfo.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	readyFunc := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: MetricNamespace, Subsystem: MetricSubsystem, Name: "ready",
		Help: "1 when /readyz answers 200 (SSH accepting, keys loaded, GPU detection done, not shutting down), else 0.",
	}, ready)
	for _, c := range []prometheus.Collector{m.gpus, m.slots, buildInfo, readyFunc} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering worker metrics: %w", err)
		}
	}
	return m, nil
}
