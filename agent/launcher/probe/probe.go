// Package probe checks, before mpirun starts, that every worker can be
// reached over SSH the way mpirun will reach it: resolve, connect,
// handshake, pinned host key, public key auth, and a remote check that this
// MPI's daemon (orted or prted; hydra_pmi_proxy; hydra_bstrap_proxy) is on
// the worker's PATH.
//
// Workers are probed in parallel (bounded by Options.Parallel) with the
// in-process x/crypto client, about a millisecond per worker instead of an
// ssh fork each. Failures in transient phases (dns, tcp-*: the worker may
// still be starting) are retried with jittered exponential backoff
// (sshclient.Retry, the loop podmpi-rsh waits with too) until
// Options.Deadline; other failures end that worker's probe at once. Each
// failure is a classified sshclient.Failure with a one-line hint, and
// WriteReport prints one line per failing worker followed by a summary table.
package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcher/awaited"
	"github.com/podmpi/podmpi/agent/panictrap"
	"github.com/podmpi/podmpi/agent/sshclient"
)

// Target is one worker's SSH endpoint.
type Target struct {
	Host string
	Port int
}

// String returns host:port.
func (t Target) String() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// Defaults for Options.
const (
	DefaultParallel       = 64
	DefaultCommandTimeout = 10 * time.Second
	DefaultInitialBackoff = sshclient.DefaultInitialBackoff
	DefaultMaxBackoff     = sshclient.DefaultMaxBackoff
	DefaultProgressEvery  = 5 * time.Second
)

// maxNamesListed is how many awaited workers a progress line lists one by
// one; more are grouped by answer (awaited.Line).
const maxNamesListed = 10

// Options configure Run.
type Options struct {
	// Client is the SSH client configuration (job key, pinned host key,
	// per-attempt timeouts).
	Client sshclient.Config
	// Daemons are the remote check's program names, any of which must be
	// on the worker's PATH (or executable, for absolute paths). Empty skips
	// the remote check.
	Daemons []string
	// Parallel bounds how many workers are probed at once; DefaultParallel
	// when <= 0.
	Parallel int
	// Deadline bounds the whole run: transient failures are retried until
	// it, and no attempt outlives it, except that every worker gets at
	// least one attempt of minAttempt. Zero means one attempt per worker,
	// bounded only by Client's timeouts and CommandTimeout.
	Deadline time.Duration
	// SSHSample, when > 0 and smaller than the number of targets, limits
	// the full SSH probe (handshake, host key, auth, remote check) to that
	// many workers spread evenly over the list; the others get the banner
	// check (resolve, connect, SSH identification: sshclient.Banner). Host
	// keys, authorized keys and the image's PATH are job-wide, so a sample
	// finds their faults, while every worker is still checked for DNS, TCP
	// and a non-SSH listener. A full P-521 handshake costs the launcher ~5 ms
	// of CPU per worker, which is what this bounds at scale. 0 probes every
	// worker fully.
	SSHSample int
	// CommandTimeout bounds the remote check; DefaultCommandTimeout when 0.
	CommandTimeout time.Duration
	// InitialBackoff and MaxBackoff shape the retry delays (doubling, with
	// 0.5x-1.5x jitter). Defaults DefaultInitialBackoff, DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// Logger receives the progress lines (info), retries (debug) and the
	// insecure-host-key warning; nil discards.
	Logger *slog.Logger
	// ProgressEvery is how often, while workers are awaited, one Info line
	// names them, each with what its last attempt got ("tj-node-0-2.tj
	// (tcp-refused: connection refused on tj-node-0-2.tj:2222)"): the
	// first as soon as one must be waited for and every worker was tried
	// once; DefaultProgressEvery when 0.
	ProgressEvery time.Duration
	// Note, when set, says what else is known of an awaited worker (what
	// Kubernetes says of its pod), "" for nothing; the progress lines add
	// it. It must not block.
	Note func(host string) string
	// OnAttempt, when set, is called after every attempt, concurrently from
	// the probing goroutines (for progress output and metrics).
	OnAttempt func(Attempt)
	// Keep, when set, is offered the connection of every successful full
	// probe; when it returns true the connection is the caller's (the
	// launcher's pool, for mpirun's sessions) and the probe does not close
	// it.
	Keep func(t Target, c *ssh.Client) bool
	// Explain, when set, is asked after an attempt whose TCP connect was
	// refused: nil means "may still be starting" (the attempt is retried as
	// usual); a Failure (phase sshclient.PhaseNotWorkerAgent) says what
	// answers there instead of a worker-agent, and the worker fails at once
	// rather than after the whole deadline.
	Explain func(ctx context.Context, t Target) *sshclient.Failure
}

// Attempt is one connection attempt to one worker.
type Attempt struct {
	Target  Target
	N       int                // 1-based attempt number
	Failure *sshclient.Failure // nil on success
	Latency time.Duration
	Retry   bool // another attempt follows
}

// Checks a worker can get.
const (
	CheckSSH    = "ssh"    // full probe
	CheckBanner = "banner" // resolve, connect, SSH identification only
)

// Result is the outcome for one worker.
type Result struct {
	Target   Target
	Check    string // CheckSSH or CheckBanner
	OK       bool
	Failure  *sshclient.Failure // the last attempt's failure; nil when OK
	Latency  time.Duration      // of the successful attempt: connect through remote check
	Attempts int
	// DaemonPath is what the remote check found, e.g. /usr/bin/orted.
	DaemonPath string
}

// Run probes every target and returns their results in target order. It
// returns when every target has succeeded or given up, or ctx is done.
func Run(ctx context.Context, targets []Target, opts Options) []Result {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Client.InsecureIgnoreHostKey {
		log.Warn("host keys are not verified (--ssh.insecure-ignore-host-key): any server answering on the workers' addresses is trusted; pin the job's id_rsa.pub instead")
	}
	par := opts.Parallel
	if par <= 0 {
		par = DefaultParallel
	}
	par = min(par, len(targets))
	var deadline time.Time
	if opts.Deadline > 0 {
		deadline = time.Now().Add(opts.Deadline)
	}
	full := SpreadSample(len(targets), opts.SSHSample)
	results := make([]Result, len(targets))
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Host
	}
	awaiting := awaited.NewTracker(names, opts.Note)
	every := opts.ProgressEvery
	if every <= 0 {
		every = DefaultProgressEvery
	}
	start := time.Now()
	stop := awaiting.Report(every, maxNamesListed, func(checked, total int, waiting string) {
		left := ""
		if !deadline.IsZero() {
			left = time.Until(deadline).Round(time.Second).String()
		}
		log.Info(fmt.Sprintf("probe: %d/%d workers checked; waiting for %s", checked, total, waiting),
			"checked", checked, "workers", total, "elapsed", time.Since(start).Round(time.Second).String(), "time_left", left)
	})
	next := make(chan int)
	var wg sync.WaitGroup
	var trap panictrap.Trap
	for range par {
		wg.Go(func() {
			for i := range next {
				check := CheckSSH
				if full != nil && !full[i] {
					check = CheckBanner
				}
				func() {
					defer trap.Capture("a probe goroutine")
					defer awaiting.Settled(i)
					results[i] = probeOne(ctx, targets[i], deadline, check, opts, log, func(f *sshclient.Failure, retry bool) {
						awaiting.Saw(i, answer(f))
						if retry {
							awaiting.Waits()
						}
					})
				}()
			}
		})
	}
	for i := range targets {
		next <- i
	}
	close(next)
	wg.Wait()
	stop()
	trap.Rethrow()
	return results
}

// answer names what a failed attempt got, for the progress lines: its
// phase and what the network said ("tcp-refused: connection refused on
// tj-node-0-1.tj:2222", "dns: no answer from the DNS server 10.96.0.10:53").
func answer(f *sshclient.Failure) awaited.Answer {
	a := awaited.Net(f.Cause, net.JoinHostPort(f.Host, strconv.Itoa(f.Port)))
	phase := string(f.Phase) + ": "
	return awaited.Answer{Kind: phase + a.Kind, Detail: phase + a.Text()}
}

// SpreadSample marks which of n items a sample of size sample takes:
// evenly spaced, first and last included, so that a fault confined to one
// part of the list (a node pool, a rack, the last pods to start) is still
// seen. nil means all (sample <= 0 or >= n). The probe uses it for the full
// SSH check (Options.SSHSample) and package slots for asking worker-agents
// when the hostfile already gives every count.
func SpreadSample(n, sample int) []bool {
	if sample <= 0 || sample >= n {
		return nil
	}
	full := make([]bool, n)
	if sample == 1 {
		full[0] = true
		return full
	}
	for k := range sample {
		full[k*(n-1)/(sample-1)] = true
	}
	return full
}

// probeOne probes one worker until it passes, fails for good, or the
// deadline; failed is called after each failed attempt, retry saying
// whether another follows.
func probeOne(ctx context.Context, t Target, deadline time.Time, check string, opts Options, log *slog.Logger, failed func(f *sshclient.Failure, retry bool)) Result {
	log = log.With("worker", t.String())
	var path string
	retry := sshclient.Retry{
		Deadline: deadline, Initial: opts.InitialBackoff, Max: opts.MaxBackoff,
		OnAttempt: func(n int, f *sshclient.Failure, took, next time.Duration) {
			if opts.OnAttempt != nil {
				opts.OnAttempt(Attempt{Target: t, N: n, Failure: f, Latency: took, Retry: next > 0})
			}
			if f != nil {
				failed(f, next > 0)
			}
			switch {
			case f != nil && next > 0:
				log.Debug("retrying", "in", next, "attempt", n, "phase", string(f.Phase), "cause", f.CauseText(),
					"time_left", time.Until(deadline).Round(time.Millisecond))
			case f != nil && n > 1:
				log.Debug("giving up", "attempts", n, "failure", f)
			}
		},
	}
	var latency time.Duration
	n, f := retry.Do(ctx, func(actx context.Context) *sshclient.Failure {
		start := time.Now()
		p, f := attempt(actx, t, check, opts)
		path, latency = p, time.Since(start)
		if f != nil && f.Phase == sshclient.PhaseTCPRefused && opts.Explain != nil {
			if why := opts.Explain(ctx, t); why != nil {
				return why // what answers there will not become a worker-agent
			}
		}
		return f
	})
	if f != nil {
		return Result{Target: t, Check: check, Failure: f, Attempts: n}
	}
	return Result{Target: t, Check: check, OK: true, Latency: latency, Attempts: n, DaemonPath: path}
}

// attempt makes one connection and runs the remote check.
func attempt(ctx context.Context, t Target, check string, opts Options) (string, *sshclient.Failure) {
	if check == CheckBanner {
		_, f := sshclient.Banner(ctx, t.Host, t.Port, opts.Client)
		return "", f
	}
	client, f := sshclient.Dial(ctx, t.Host, t.Port, opts.Client)
	if f != nil {
		return "", f
	}
	var path string
	if len(opts.Daemons) > 0 {
		path, f = remoteCheck(ctx, client, t, opts)
	}
	if f == nil && opts.Keep != nil && opts.Keep(t, client) {
		return path, nil
	}
	client.Close()
	return path, f
}

// CheckCommand is the shell command of the remote check for daemons:
// `command -v 'orted' || command -v 'prted'`.
func CheckCommand(daemons []string) string {
	parts := make([]string, len(daemons))
	for i, d := range daemons {
		parts[i] = "command -v " + shellQuote(d)
	}
	return strings.Join(parts, " || ")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func remoteCheck(ctx context.Context, client *ssh.Client, t Target, opts Options) (string, *sshclient.Failure) {
	timeout := opts.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	cmd := CheckCommand(opts.Daemons)
	type outcome struct {
		out []byte
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		s, err := client.NewSession()
		if err != nil {
			done <- outcome{err: err}
			return
		}
		defer s.Close()
		out, err := s.Output(cmd)
		done <- outcome{out, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var o outcome
	select {
	case o = <-done:
	case <-timer.C:
		client.Close() // unblocks the session goroutine
		<-done
		o.err = fmt.Errorf("remote check %q did not finish within %s", cmd, timeout)
	case <-ctx.Done():
		client.Close()
		<-done
		o.err = fmt.Errorf("remote check %q: %w", cmd, ctx.Err())
	}
	names := strings.Join(opts.Daemons, "/")
	missingHint := fmt.Sprintf("%s is not on the PATH of worker-agent on %s; install the MPI in the worker image or set PATH in the worker container", names, t.Host)
	var ee *ssh.ExitError
	switch {
	case errors.As(o.err, &ee):
		return "", &sshclient.Failure{Host: t.Host, Port: t.Port, Phase: sshclient.PhaseRemoteCommand,
			Cause: fmt.Errorf("%s not found: `%s` exited with status %d: %w", names, cmd, ee.ExitStatus(), o.err),
			Hint:  missingHint}
	case o.err != nil:
		return "", sshclient.Classify(t.Host, t.Port, sshclient.PhaseRemoteCommand, o.err)
	}
	path := strings.TrimSpace(firstLine(string(o.out)))
	if path == "" {
		return "", &sshclient.Failure{Host: t.Host, Port: t.Port, Phase: sshclient.PhaseRemoteCommand,
			Cause: fmt.Errorf("%s not found: `%s` printed nothing", names, cmd), Hint: missingHint}
	}
	return path, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// AllOK reports whether every result succeeded.
func AllOK(results []Result) bool {
	for _, r := range results {
		if !r.OK {
			return false
		}
	}
	return true
}

// WriteReport writes one line per failing worker ("host:port: phase: cause;
// hint: ..."), then a table of every worker (result or failed phase, latency,
// attempts, daemon found) and a totals line. Write errors are ignored (the
// report goes to a terminal or a pod log).
func WriteReport(w io.Writer, results []Result) {
	var b strings.Builder
	for _, r := range results {
		if !r.OK && r.Failure != nil {
			b.WriteString(r.Failure.Error())
			b.WriteByte('\n')
		}
	}
	rows := [][]string{{"WORKER", "RESULT", "LATENCY", "ATTEMPTS", "DAEMON"}}
	byPhase := map[sshclient.Phase]int{}
	var phases []sshclient.Phase
	ok := 0
	for _, r := range results {
		res, lat, daemon := "ok", formatLatency(r.Latency), r.DaemonPath
		if r.OK {
			ok++
		} else {
			ph := sshclient.Phase("unknown")
			if r.Failure != nil {
				ph = r.Failure.Phase
			}
			if byPhase[ph] == 0 {
				phases = append(phases, ph)
			}
			byPhase[ph]++
			res, lat = string(ph), "-"
		}
		switch {
		case r.Check == CheckBanner && r.OK:
			daemon = "(banner check)"
		case daemon == "":
			daemon = "-"
		}
		rows = append(rows, []string{r.Target.String(), res, lat, strconv.Itoa(r.Attempts), daemon})
	}
	writeTable(&b, rows)
	fmt.Fprintf(&b, "%d workers: %d ok, %d failed", len(results), ok, len(results)-ok)
	if n := countCheck(results, CheckBanner); n > 0 {
		fmt.Fprintf(&b, "; %d fully probed over SSH, %d by banner check (--probe.ssh-sample)", len(results)-n, n)
	}
	if len(phases) > 0 {
		parts := make([]string, len(phases))
		for i, p := range phases {
			parts[i] = fmt.Sprintf("%s %d", p, byPhase[p])
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(w, b.String())
}

func countCheck(results []Result, check string) int {
	n := 0
	for _, r := range results {
		if r.Check == check {
			n++
		}
	}
	return n
}

func formatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// writeTable left-aligns columns separated by two spaces, without trailing
// blanks.
func writeTable(b *strings.Builder, rows [][]string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}
