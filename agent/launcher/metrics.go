package launcher

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/podmpi/podmpi/agent/sshclient"
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

// Metrics are the launcher's init and run metrics. None has a label whose
// values grow with the workers: a job of a thousand workers exports as many
// series as a job of one.
type Metrics struct {
	// Registry holds the launcher's own metrics: what a Pushgateway gets.
	Registry *prometheus.Registry
	// Scrape is what /metrics serves: Registry plus the Go runtime and
	// process collectors.
	Scrape prometheus.Gatherer

	Start           prometheus.Gauge
	PhaseStart      *prometheus.GaugeVec
	PhaseDuration   *prometheus.GaugeVec
	PhaseSuccess    *prometheus.GaugeVec
	WorkersExpected prometheus.Gauge
	WorkersResolved prometheus.Gauge
	WorkersReach    prometheus.Gauge
	ProbeLatency    prometheus.Histogram
	ProbeFailures   *prometheus.CounterVec
	SlotMismatch    prometheus.Gauge
	MPIRunExitCode  prometheus.Gauge
	InitDuration    prometheus.Gauge
	// RootCause is 1 for the cause the launcher named after a failed
	// mpirun (postmortem.Causes), 0 for the others; absent before.
	RootCause *prometheus.GaugeVec
}

// NewMetrics builds the launcher metrics on a fresh registry, with a
// build-info gauge; the start timestamp is now.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Start: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_start_timestamp_seconds", Help: "When the launcher started (Unix time).",
		}),
		PhaseStart: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "podmpi_launcher_phase_start_timestamp_seconds",
			Help: "When each launcher phase began (Unix time): discovery, mpi, dns-wait, slots, hostfile, probe, mpirun; absent before it begins.",
		}, []string{"phase"}),
		PhaseDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "podmpi_launcher_phase_duration_seconds",
			Help: "Wall time of each launcher phase (discovery, mpi, dns-wait, slots, hostfile, probe, mpirun).",
		}, []string{"phase"}),
		PhaseSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "podmpi_launcher_phase_success",
			Help: "1 when the phase succeeded, 0 when it failed; absent when it has not ended.",
		}, []string{"phase"}),
		WorkersExpected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_workers_expected", Help: "Hosts the job expects (hostfile, --workers, template or --workers-expected).",
		}),
		WorkersResolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_workers_resolved", Help: "Expected hosts whose names resolve in DNS.",
		}),
		WorkersReach: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_workers_reachable", Help: "Workers that passed the SSH probe (connect, host key, auth, MPI daemon on PATH).",
		}),
		ProbeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "podmpi_launcher_probe_latency_seconds",
			Help:    "Duration of each worker's successful SSH probe attempt (connect, host key, auth, MPI daemon check).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		ProbeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_launcher_probe_failures_total",
			Help: "Workers that failed the SSH probe, by the phase that failed (dns, tcp-refused, tcp-timeout, tcp, handshake, host-key, auth, remote-command, not-worker-agent, config).",
		}, []string{"phase"}),
		SlotMismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_slot_mismatch_workers",
			Help: "Workers whose slot count from the hostfile and from their worker-agent (its GPUs) disagree.",
		}),
		MPIRunExitCode: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_mpirun_exit_code", Help: "Exit code of mpirun (-1 while it runs or when it never started).",
		}),
		InitDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_launcher_init_duration_seconds", Help: "Time from launcher start to mpirun exec.",
		}),
		RootCause: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "podmpi_launcher_root_cause",
			Help: "1 for the root cause the launcher named after mpirun failed (oom, gpu, launch, gone, crash, killed, exit, daemon, cascade, stopped, unknown), 0 for the others.",
		}, []string{"cause"}),
	}
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "podmpi_launcher_build_info", Help: "Build information of the launcher; always 1.",
	}, []string{"version", "commit", "goversion"})
	v := version.Get()
	bi.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	m.MPIRunExitCode.Set(-1)
	m.Start.SetToCurrentTime()
	for _, ph := range sshclient.Phases {
		m.ProbeFailures.WithLabelValues(string(ph)) // every phase present, at 0
	}
	reg.MustRegister(m.Start, m.PhaseStart, m.PhaseDuration, m.PhaseSuccess, m.WorkersExpected, m.WorkersResolved,
		m.WorkersReach, m.ProbeLatency, m.ProbeFailures, m.SlotMismatch, m.MPIRunExitCode, m.InitDuration, m.RootCause, bi)
	runtime := prometheus.NewRegistry()
	runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Scrape = prometheus.Gatherers{reg, runtime}
	return m
}
