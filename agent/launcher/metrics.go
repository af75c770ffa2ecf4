package launcher

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/podmpi/podmpi/agent/version"
)

// Phases of a launcher run, in order. Each gets a duration and a success
// gauge labelled {phase}.
const (
	PhaseDiscovery = "discovery"
	PhaseMPI       = "mpi"
	PhaseDNSWait   = "dns-wait"
	PhaseSlots     = "slots"
	PhaseHostfile  = "hostfile"
	PhaseProbe     = "probe"
	PhaseMPIRun    = "mpirun"
)

// Phases lists every phase in run order.
var Phases = []string{PhaseDiscovery, PhaseMPI, PhaseDNSWait, PhaseSlots, PhaseHostfile, PhaseProbe, PhaseMPIRun}

// Metrics are the launcher's init and run metrics, on a registry of their own.
type Metrics struct {
	Registry        *prometheus.Registry
	PhaseDuration   *prometheus.GaugeVec
	PhaseSuccess    *prometheus.GaugeVec
	WorkersExpected prometheus.Gauge
	WorkersResolved prometheus.Gauge
	WorkersReach    prometheus.Gauge
	ProbeLatency    *prometheus.GaugeVec
	MPIRunExitCode  prometheus.Gauge
	InitDuration    prometheus.Gauge
	// RootCause is 1 for the cause the launcher named after a failed
	// mpirun (postmortem.Causes), 0 for the others; absent before.
	RootCause *prometheus.GaugeVec
}

// NewMetrics builds the launcher metrics on a fresh registry, with the Go
// and process collectors and a build-info gauge.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		PhaseDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mpi_launcher_phase_duration_seconds",
			Help: "Wall time of each launcher phase (discovery, mpi, dns-wait, slots, hostfile, probe, mpirun).",
		}, []string{"phase"}),
		PhaseSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mpi_launcher_phase_success",
			Help: "1 when the phase succeeded, 0 when it failed; absent when it has not run.",
		}, []string{"phase"}),
		WorkersExpected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mpi_launcher_workers_expected", Help: "Hosts the job expects (hostfile, --workers, template or --workers-expected).",
		}),
		WorkersResolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mpi_launcher_workers_resolved", Help: "Expected hosts whose names resolve in DNS.",
		}),
		WorkersReach: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mpi_launcher_workers_reachable", Help: "Workers that passed the SSH probe (connect, host key, auth, MPI daemon on PATH).",
		}),
		ProbeLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mpi_launcher_probe_latency_seconds", Help: "Duration of the successful SSH probe attempt per worker.",
		}, []string{"host"}),
		MPIRunExitCode: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mpi_launcher_mpirun_exit_code", Help: "Exit code of mpirun (-1 while it runs or when it never started).",
		}),
		InitDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mpi_launcher_init_duration_seconds", Help: "Time from launcher start to mpirun exec.",
		}),
		RootCause: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "podmpi_launcher_root_cause",
			Help: "1 for the root cause the launcher named after mpirun failed (oom, gpu, launch, gone, crash, killed, exit, daemon, cascade, stopped, unknown), 0 for the others.",
		}, []string{"cause"}),
	}
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mpi_launcher_build_info", Help: "Build information of the launcher; always 1.",
	}, []string{"version", "commit", "goversion"})
	v := version.Get()
	bi.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	m.MPIRunExitCode.Set(-1)
	reg.MustRegister(m.PhaseDuration, m.PhaseSuccess, m.WorkersExpected, m.WorkersResolved, m.WorkersReach,
		m.ProbeLatency, m.MPIRunExitCode, m.InitDuration, m.RootCause, bi,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
