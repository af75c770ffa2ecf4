package account

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the account's collectors. Every label value comes from a
// fixed list (exitReasons, the GPU error kinds): no label names a host, a
// rank or a process.
//
//	podmpi_worker_oom_kills_total
//	podmpi_worker_memory_limit_bytes
//	podmpi_worker_memory_usage_bytes
//	podmpi_worker_session_exits_total{reason="exit|SIGKILL|SIGSEGV|...|other"}
//	podmpi_worker_rank_exits_total{reason="oom|exit|SIGKILL|SIGSEGV|...|other|unknown"}
//	podmpi_worker_gpu_errors_total{kind="xid|ecc_dbe"}
type metrics struct {
	oomKills     prometheus.Counter
	sessionExits *prometheus.CounterVec
	rankExits    *prometheus.CounterVec
	gpuErrors    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, gauges func() (limit, usage float64)) (*metrics, error) {
	m := &metrics{
		oomKills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "podmpi_worker_oom_kills_total",
			Help: "Processes of the pod's memory cgroup killed by the kernel's OOM killer since worker-agent started (the cgroup's oom_kill counter).",
		}),
		sessionExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_session_exits_total",
			Help: "SSH session commands (orted, prted, hydra_pmi_proxy) that failed, by reason: exit (a non-zero status), the signal that ended them, or other (another signal).",
		}, []string{"reason"}),
		rankExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_rank_exits_total",
			Help: "MPI ranks below the agent's sessions that ended other than with status 0, by reason: oom, exit (a non-zero status), the signal, other (another signal), or unknown (the status was not seen).",
		}, []string{"reason"}),
		gpuErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_gpu_errors_total",
			Help: "GPU errors NVML reported: xid (critical Xid errors) and ecc_dbe (double-bit ECC errors).",
		}, []string{"kind"}),
	}
	for _, r := range exitReasons() {
		m.sessionExits.WithLabelValues(r)
		m.rankExits.WithLabelValues(r)
	}
	m.rankExits.WithLabelValues("oom")
	m.rankExits.WithLabelValues("unknown")
	m.gpuErrors.WithLabelValues("xid")
	m.gpuErrors.WithLabelValues("ecc_dbe")
	if reg == nil {
		return m, nil
	}
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "podmpi_worker_memory_limit_bytes",
		Help: "Memory limit of the pod's memory cgroup (the tightest from the container's cgroup up); 0 when there is none or no cgroup was found.",
	}, func() float64 { l, _ := gauges(); return l })
	usage := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "podmpi_worker_memory_usage_bytes",
		Help: "Memory usage of the pod's memory cgroup at the last reading.",
	}, func() float64 { _, u := gauges(); return u })
	for _, c := range []prometheus.Collector{m.oomKills, m.sessionExits, m.rankExits, m.gpuErrors, limit, usage} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering account metrics: %w", err)
		}
	}
	return m, nil
}
