package sshd

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection results of podmpi_worker_ssh_connections_total. Every accepted TCP
// connection is counted exactly once, when its pre-auth phase ends.
const (
	connAuthenticated       = "accepted"             // key exchange and auth completed
	connRejectedMaxStartups = "rejected_maxstartups" // refused at once: MaxStartups reached (or its random early drop)
	connRejectedPerSource   = "rejected_per_source"  // refused at once: PerSourceMaxStartups reached for the client's IP
	connHandshakeFailed     = "handshake_failed"     // kex, auth, grace timeout or client gone
)

// Auth failure reasons of podmpi_worker_ssh_auth_failures_total; one per
// connection that entered the auth phase and did not authenticate.
const (
	authUnknownKey = "unknown_key" // only keys not in authorized_keys were offered
	authNoKey      = "no_key"      // no public key offered (none/password/keyboard-interactive only)
	authMaxTries   = "max_tries"   // MaxAuthTries reached
	authSignature  = "signature"   // an authorized key was offered but never proven (bad or missing signature)
	authTimeout    = "timeout"     // LoginGraceTime expired during auth
)

// Refused request kinds of podmpi_worker_ssh_requests_refused_total.
var refusedKinds = []string{"pty", "subsystem", "x11", "agent", "port_forward", "env", "max_sessions", "other"}

// exitCodeLabels are the exit codes with their own label value; every other
// code is "other", death by signal is "signal", a command that could not be
// started is "start_failed".
var exitCodeLabels = []string{"0", "1", "2", "126", "127", "255", "signal", "other", "start_failed"}

// Metrics holds the SSH server's Prometheus collectors. All label sets are
// small and fixed. A nil *Metrics is valid and collects nothing.
type Metrics struct {
	connections     *prometheus.CounterVec
	authFailures    *prometheus.CounterVec
	sessionsActive  prometheus.Gauge
	sessionDuration prometheus.Histogram
	sessionExits    *prometheus.CounterVec
	refused         *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (when reg is
// not nil). It panics if they are already registered with reg, as
// prometheus.MustRegister does; call it once per registry.
//
//	podmpi_worker_ssh_connections_total{result="accepted|rejected_maxstartups|rejected_per_source|handshake_failed"}
//	podmpi_worker_ssh_auth_failures_total{reason="unknown_key|no_key|max_tries|signature|timeout"}
//	podmpi_worker_ssh_sessions_active
//	podmpi_worker_ssh_session_duration_seconds
//	podmpi_worker_ssh_session_exits_total{code="0|1|2|126|127|255|signal|other|start_failed"}
//	podmpi_worker_ssh_requests_refused_total{kind="pty|subsystem|x11|agent|port_forward|env|max_sessions|other"}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_ssh_connections_total",
			Help: "TCP connections to the worker SSH server by pre-auth outcome.",
		}, []string{"result"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_ssh_auth_failures_total",
			Help: "SSH connections that tried to authenticate and failed, by reason.",
		}, []string{"reason"}),
		sessionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "podmpi_worker_ssh_sessions_active",
			Help: "SSH sessions whose command is running.",
		}),
		sessionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "podmpi_worker_ssh_session_duration_seconds",
			Help:    "Wall time of SSH sessions from command start to exit status.",
			Buckets: []float64{0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400, 86400},
		}),
		sessionExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_ssh_session_exits_total",
			Help: "Finished SSH sessions by exit code (codes outside a small set are \"other\").",
		}, []string{"code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "podmpi_worker_ssh_requests_refused_total",
			Help: "SSH requests and channels refused by policy, by kind.",
		}, []string{"kind"}),
	}
	for _, r := range []string{connAuthenticated, connRejectedMaxStartups, connRejectedPerSource, connHandshakeFailed} {
		m.connections.WithLabelValues(r)
	}
	for _, r := range []string{authUnknownKey, authNoKey, authMaxTries, authSignature, authTimeout} {
		m.authFailures.WithLabelValues(r)
	}
	for _, c := range exitCodeLabels {
		m.sessionExits.WithLabelValues(c)
	}
	for _, k := range refusedKinds {
		m.refused.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.connections, m.authFailures, m.sessionsActive, m.sessionDuration, m.sessionExits, m.refused)
	}
	return m
}

func (m *Metrics) conn(result string) {
	if m != nil {
		m.connections.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) authFailure(reason string) {
	if m != nil {
		m.authFailures.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) sessionStarted() {
	if m != nil {
		m.sessionsActive.Inc()
	}
}

func (m *Metrics) sessionEnded(d time.Duration, codeLabel string) {
	if m != nil {
		m.sessionsActive.Dec()
		m.sessionDuration.Observe(d.Seconds())
		m.sessionExits.WithLabelValues(codeLabel).Inc()
	}
}

func (m *Metrics) startFailed() {
	if m != nil {
		m.sessionExits.WithLabelValues("start_failed").Inc()
	}
}

func (m *Metrics) refusedReq(kind string) {
	if m != nil {
		m.refused.WithLabelValues(kind).Inc()
	}
}

// exitLabel maps an exit code (or -1 for a signal) to its bounded label.
func exitLabel(code int, signaled bool) string {
	if signaled {
		return "signal"
	}
	switch code {
	case 0, 1, 2, 126, 127, 255:
		return strconv.Itoa(code)
	}
	return "other"
}
