package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/podmpi/podmpi/agent/worker/api"
)

// maxMetricsInFlight bounds concurrent /metrics scrapes, and
// maxEventsInFlight concurrent /events requests (a launcher asks each
// worker once at a time; more is a client gone wrong, or a flood).
// Requests that prove they come from the job's launcher (api.ProofHeader)
// have maxLauncherEventsInFlight of their own, so that strangers holding
// every shared slot (slow readers from any pod) never make the launcher
// wait, count the worker silent and blame it.
const (
	maxMetricsInFlight        = 4
	maxEventsInFlight         = 4
	maxLauncherEventsInFlight = 4
)

// eventsWriteTimeout bounds one /events answer, its wait for a fresh
// reading (at most a second) included: the document is a few hundred
// kilobytes at most, which a reader on the pod network takes in
// milliseconds; one that reads slower loses the answer rather than hold a
// slot for the server's 30 s.
const eventsWriteTimeout = 5 * time.Second

func (w *Worker) newMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", w.healthz)
	mux.HandleFunc("GET /readyz", w.readyz)
	mux.HandleFunc("GET /info", w.info)
	mux.Handle("GET "+api.EventsPath, w.eventsBudgets(http.HandlerFunc(w.events)))
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{
		ErrorLog:            promLogger{w},
		Registry:            w.reg,
		MaxRequestsInFlight: maxMetricsInFlight,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", w.index)
	return mux
}

func (w *Worker) index(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = rw.Write([]byte("worker-agent\n\n/healthz  liveness\n/readyz   readiness (503 with the reasons when not ready)\n/info     JSON: slots, GPUs, MPI daemons, host key, version\n/events   JSON: OOM kills, rank and session exits, GPU errors (?after=<lastSeq>&since=<RFC 3339 time>)\n/metrics  Prometheus metrics\n"))
}

func (w *Worker) healthz(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	_, _ = rw.Write([]byte("ok\n"))
}

func (w *Worker) readyz(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	ok, why := w.Readiness()
	if ok {
		_, _ = rw.Write([]byte("ready\n"))
		return
	}
	rw.WriteHeader(http.StatusServiceUnavailable)
	_, _ = rw.Write([]byte("not ready: " + strings.Join(why, "; ") + "\n"))
}

func (w *Worker) info(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	if err := enc.Encode(w.Info()); err != nil {
		w.log.Debug("writing /info", "err", err)
	}
}

// eventsBudgets serves h to the job's launcher (a request with a valid
// proof) within maxLauncherEventsInFlight, and to everyone else within
// maxEventsInFlight.
func (w *Worker) eventsBudgets(h http.Handler) http.Handler {
	shared := limitInFlight(maxEventsInFlight, api.EventsPath, h)
	launcher := limitInFlight(maxLauncherEventsInFlight, api.EventsPath+" (for the job's launcher)", h)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.gate.proven(r) {
			launcher.ServeHTTP(rw, r)
			return
		}
		shared.ServeHTTP(rw, r)
	})
}

func (w *Worker) events(rw http.ResponseWriter, r *http.Request) {
	// Not supported by test recorders only; the server's WriteTimeout
	// then still holds.
	_ = http.NewResponseController(rw).SetWriteDeadline(time.Now().Add(w.eventsWrite))
	rw.Header().Set("Cache-Control", "no-store")
	if w.cfg.Account == nil {
		http.Error(rw, "this worker-agent keeps no account of its pod", http.StatusNotFound)
		return
	}
	q, err := api.ParseEventsQuery(r.URL.Query())
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	doc := w.cfg.Account.Snapshot(r.Context(), q)
	if w.cfg.Launchers != nil {
		doc.Launchers = w.cfg.Launchers()
	}
	rw.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		w.log.Debug("writing /events", "err", err)
	}
}

// promLogger adapts the worker's slog logger to promhttp's Logger.
type promLogger struct{ w *Worker }

func (l promLogger) Println(v ...any) {
	l.w.log.Error("serving /metrics", "err", strings.TrimSpace(sprintln(v...)))
}

func sprintln(v ...any) string { return fmt.Sprintln(v...) }
