// Package trainerstatus carries an MPI job's state into its TrainJob's
// status, through the status API of Kubeflow Trainer (v2.2 and later,
// feature gate TrainJobStatus, alpha and off by default).
//
// What Trainer offers: when the gate is on, it gives the pods of the step
// labelled trainer (in MPI runtimes, the launcher, and only the launcher)
// three variables: KUBEFLOW_TRAINER_SERVER_URL, an https endpoint of the
// controller that takes
//
//	POST {"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds", "metrics": [{"name", "value"}], "lastUpdatedTime"}}
//
// and applies it to .status.trainerStatus; KUBEFLOW_TRAINER_SERVER_TOKEN,
// the path of a projected service-account token for the job (an hour's
// validity, rotated by the kubelet: read it at every request); and
// KUBEFLOW_TRAINER_SERVER_CA_CERT, the path of the CA that signed the
// endpoint's certificate. The controller's API client is shared by every
// TrainJob of the cluster (5 requests a second), so a job posts at most
// about once per MinInterval; a body is at most MaxBody bytes, a status at
// most MaxMetrics metrics of names and values of at most MaxField
// characters. The server applies every request with one field owner and
// forced ownership: each request replaces the whole trainerStatus, and a
// field it leaves out is removed.
//
// What MPI jobs lack upstream, and what this package gives them:
//
//   - The launcher reports itself (Reporter): its phase, the workers
//     expected, resolved and reachable, the slots and the init time while it
//     starts, and after a failure the root cause, host, rank and exit code,
//     as metrics whose names start with Prefix. The API has no failure
//     field; these metrics are where a failed MPI TrainJob says why.
//   - The ranks report through the launcher (Proxy): on every pod, the
//     ranks get the three variables pointing at an endpoint podmpi serves on
//     loopback with a token of its own (Local), never Trainer's token; what
//     they post reaches Trainer with the launcher's token.
//   - Neither overwrites the other: since every request replaces the whole
//     status, the launcher keeps the ranks' last request (their progress,
//     time estimate and metrics) and sends it with its own metrics added.
//     A writer that posts to Trainer directly, not through podmpi's
//     endpoint, is not seen: podmpi's next request would drop what it
//     posted (docs say so).
//   - Names starting with Prefix are podmpi's own: the endpoint refuses a
//     rank's request that uses one (422, the message names the prefix), and
//     the status sent never holds a rank's value under such a name. A
//     refusal rather than podmpi's value silently replacing the rank's: the
//     rank learns at once (the SDK returns False and logs the code) that a
//     name it chose will never show, and a failed job can never show a
//     rank's podmpi_phase=running beside podmpi_exit_code.
//
// Delivery. One goroutine (Reporter.Run) sends every request, one at a
// time, so that Trainer applies them in the order of the states they
// carry; each request carries the latest state, whole. It sends at most
// once per MinInterval while the job runs (a job of T seconds makes at
// most T/MinInterval+2 requests when none fails). A request that gets no
// answer, 429 or 5xx is sent again, with the latest state, after a backoff
// (from MinInterval up to a minute while the job runs; Retry-After when
// Trainer gives one and it is longer), until one is taken: a state is never
// lost to a failed request, only replaced by a newer one. Another 4xx
// refuses that content, and the next change is sent; 401, 403 and 404
// refuse the job (a token Trainer does not take for this TrainJob, a
// TrainJob it does not know, the gate off) and nothing more is sent. The
// launcher's end (Reporter.Final) goes without the pace: Final waits for a
// request under way, then sends the end, retrying within its deadline,
// and says whether it landed.
//
// A rank's request is answered at once, as Trainer answers one it applied
// (200, the request echoed), once podmpi has taken it: the Kubeflow SDK's
// update_trainjob_status, which gives up after 5 s, returns True. Through
// podmpi, True means that the content is sent to Trainer, again after a
// failure, until Trainer takes it or a newer request of the ranks replaces
// it; only the launcher's exit ends that (its end is the last request),
// and only a refusal by Trainer of that content (logged by the launcher)
// drops it. False means that it is not sent: the body is invalid (422,
// 413: what the CRD would refuse, or a name of podmpi's), the token is not
// the run's (403), or Trainer has refused this job's requests for good
// (its 403 or 404, passed on with the reason).
//
// Nothing here fails or delays the job: every request runs in the
// background within a deadline, a failure is logged (once per kind at
// WARN, then at DEBUG), and without the variables nothing is done and
// nothing is logged above INFO.
package trainerstatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/podmpi/podmpi/agent/statusfwd"
)

// The API's limits and the pace this package keeps.
const (
	// MinInterval is the least time between two requests to Trainer: the
	// pace of the SDK's own reporter, and what a controller whose client
	// serves every TrainJob at 5 requests a second can take from many jobs.
	MinInterval = 5 * time.Second
	// MaxBody bounds a request body (Trainer's server refuses more).
	MaxBody = 64 << 10
	// MaxMetrics bounds the metrics of one status (the CRD's maxItems).
	MaxMetrics = 256
	// MaxField bounds a metric's name and value, in characters.
	MaxField = 64
	// Prefix starts the name of every metric podmpi reports.
	Prefix = "podmpi_"
	// requestTimeout bounds one request to Trainer (the SDK's own timeout).
	requestTimeout = 5 * time.Second
)

// Endpoint is Trainer's status endpoint for this job, from the variables.
type Endpoint struct {
	URL       *url.URL
	TokenFile string
	CAFile    string // "" to use the system's roots
}

// FromEnv reads the endpoint from the variables (getenv is os.Getenv in
// production; the names are statusfwd's). ok is false when
// KUBEFLOW_TRAINER_SERVER_URL is unset or empty: the gate is off or this is
// not a trainer step, and nothing is to be done. An endpoint that is set
// but unusable is an error that says which variable is wrong.
func FromEnv(getenv func(string) string) (ep Endpoint, ok bool, err error) {
	raw := strings.TrimSpace(getenv(statusfwd.EnvURL))
	if raw == "" {
		return Endpoint{}, false, nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return Endpoint{}, true, fmt.Errorf("%s is not a URL: %w", statusfwd.EnvURL, err)
	case u.Host == "" || u.Path == "":
		return Endpoint{}, true, fmt.Errorf("%s=%q has no host or no path", statusfwd.EnvURL, raw)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		// Trainer's endpoint is https; plain http carries the token in
		// the clear, which is acceptable on loopback only.
		return Endpoint{}, true, fmt.Errorf("%s=%q: plain http is accepted for a loopback address only", statusfwd.EnvURL, raw)
	case u.Scheme != "https" && u.Scheme != "http":
		return Endpoint{}, true, fmt.Errorf("%s=%q: the scheme must be https", statusfwd.EnvURL, raw)
	}
	ep = Endpoint{URL: u, TokenFile: strings.TrimSpace(getenv(statusfwd.EnvToken)), CAFile: strings.TrimSpace(getenv(statusfwd.EnvCACert))}
	if ep.TokenFile == "" {
		return Endpoint{}, true, fmt.Errorf("%s is set but %s is not: no token to send", statusfwd.EnvURL, statusfwd.EnvToken)
	}
	return ep, true, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Request is the body Trainer's endpoint takes.
type Request struct {
	TrainerStatus *Status `json:"trainerStatus,omitempty"`
}

// Status is a TrainJob's .status.trainerStatus as a request sets it.
type Status struct {
	ProgressPercentage        *int32   `json:"progressPercentage,omitempty"`
	EstimatedRemainingSeconds *int32   `json:"estimatedRemainingSeconds,omitempty"`
	Metrics                   []Metric `json:"metrics,omitempty"`
	// LastUpdatedTime is kept as the writer wrote it (the SDK writes
	// Python's isoformat with microseconds); podmpi writes RFC 3339.
	LastUpdatedTime string `json:"lastUpdatedTime,omitempty"`
}

// Metric is one name and value of a status.
type Metric struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// DecodeRequest reads a request body as Trainer's endpoint would, and
// checks what the CRD would refuse anyway, so that a rank gets the reason
// from podmpi's endpoint at once: at most MaxMetrics metrics, names and
// values of 1 to MaxField characters, a progress of 0 to 100 and a
// remaining time of 0 or more.
func DecodeRequest(b []byte) (Request, error) {
	if len(b) > MaxBody {
		return Request{}, fmt.Errorf("the body is %d bytes, over the %d the status endpoint takes", len(b), MaxBody)
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return Request{}, fmt.Errorf("the body is not a status request: %w", err)
	}
	s := r.TrainerStatus
	if s == nil {
		return r, nil
	}
	if len(s.Metrics) > MaxMetrics {
		return Request{}, fmt.Errorf("%d metrics, over the %d a status holds", len(s.Metrics), MaxMetrics)
	}
	for i, m := range s.Metrics {
		if err := checkField("name", m.Name); err != nil {
			return Request{}, fmt.Errorf("metric %d: %w", i, err)
		}
		if err := checkField("value", m.Value); err != nil {
			return Request{}, fmt.Errorf("metric %d (%s): %w", i, m.Name, err)
		}
	}
	if p := s.ProgressPercentage; p != nil && (*p < 0 || *p > 100) {
		return Request{}, fmt.Errorf("progressPercentage %d is not between 0 and 100", *p)
	}
	if e := s.EstimatedRemainingSeconds; e != nil && *e < 0 {
		return Request{}, fmt.Errorf("estimatedRemainingSeconds %d is negative", *e)
	}
	return r, nil
}

func checkField(what, s string) error {
	switch n := utf8.RuneCountInString(s); {
	case n == 0:
		return fmt.Errorf("empty %s", what)
	case n > MaxField:
		return fmt.Errorf("%s of %d characters, over %d", what, n, MaxField)
	}
	return nil
}

// Clip shortens s to MaxField characters, ending in "..." when it was
// longer, and makes it non-empty: the form of every value podmpi reports.
func Clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	if utf8.RuneCountInString(s) <= MaxField {
		return s
	}
	r := []rune(s)
	return string(r[:MaxField-3]) + "..."
}

// checkReserved refuses a rank's status that names a metric with Prefix:
// those names are podmpi's own (see the package doc for why a refusal).
func checkReserved(s *Status) error {
	if s == nil {
		return nil
	}
	for i, m := range s.Metrics {
		if strings.HasPrefix(m.Name, Prefix) {
			return fmt.Errorf("metric %d (%s): names starting with %q are reserved for podmpi's own metrics (the launcher's phase, "+
				"exit code and root cause); rename the rank's metric", i, m.Name, Prefix)
		}
	}
	return nil
}

// merge is the status sent to Trainer: the ranks' last status (user; nil
// when they posted none) with podmpi's own metrics (own) added. podmpi's
// names win: a rank's metric named with Prefix, or like one of podmpi's,
// is left out (the endpoint refuses such a request before it gets here).
// The ranks' metrics come first; podmpi's take the room left of
// MaxMetrics, unless first is set (after a failure, when podmpi's root
// cause matters most): then podmpi's come first and the ranks' take the
// room left.
func merge(user *Status, own []Metric, first bool, now time.Time) *Status {
	out := &Status{LastUpdatedTime: now.UTC().Format(time.RFC3339)}
	ours := make(map[string]bool, len(own))
	for _, m := range own {
		ours[m.Name] = true
	}
	var theirs []Metric
	if user != nil {
		out.ProgressPercentage, out.EstimatedRemainingSeconds = user.ProgressPercentage, user.EstimatedRemainingSeconds
		for _, m := range user.Metrics {
			if !ours[m.Name] && !strings.HasPrefix(m.Name, Prefix) {
				theirs = append(theirs, m)
			}
		}
		if user.LastUpdatedTime != "" {
			out.LastUpdatedTime = user.LastUpdatedTime
		}
	}
	a, b := theirs, own
	if first {
		a, b = own, theirs
	}
	a = a[:min(len(a), MaxMetrics)]
	b = b[:min(len(b), MaxMetrics-len(a))]
	out.Metrics = append(append(make([]Metric, 0, len(a)+len(b)), a...), b...)
	return out
}

// errNoToken is a token file that is missing or empty.
var errNoToken = errors.New("no token")
