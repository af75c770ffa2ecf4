package postmortem

import (
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Report kinds: what mpirun said about a failed process or daemon.
const (
	// ReportSignal: a rank died of a signal (Open MPI/PRRTE "noticed that
	// process rank R ... exited on signal N", Hydra "BAD TERMINATION" with
	// "(signal N)").
	ReportSignal = "signal"
	// ReportExit: a rank exited with a non-zero status (Open MPI/PRRTE
	// "The first process to do so was: Process name ... Exit code: C",
	// Hydra "BAD TERMINATION" without a signal).
	ReportExit = "exit"
	// ReportDaemonLost: mpirun lost its connection to a remote daemon.
	ReportDaemonLost = "daemon-lost"
	// ReportDaemonFailed: a remote daemon failed to start or to call back.
	ReportDaemonFailed = "daemon-failed"
)

// Report is one failure mpirun printed, as read from its output.
type Report struct {
	Time time.Time
	Kind string
	// Rank, PID, Host: -1, 0 and "" when the message does not say.
	Rank int
	PID  int
	Host string
	// Signal is the signal number of a ReportSignal; ExitCode the status of
	// a ReportExit (-1 otherwise).
	Signal   int
	ExitCode int
	// Line is mpirun's line that said it.
	Line string
}

// maxLine bounds the part of one output line that is scanned; longer lines
// pass through whole but are scanned only up to it.
const maxLine = 4096

// maxReports bounds the reports kept.
const maxReports = 256

// maxFollow is how many lines after a message's first line its details may
// come on.
const maxFollow = 12

var (
	// Open MPI 4 (mpirun, orterun) and 5 (prterun):
	// "mpirun noticed that process rank 1 with PID 0 on node w-0 exited on signal 11 (Segmentation fault)."
	noticedRe = regexp.MustCompile(`\S+ noticed that process rank (\d+) with PID (\d+) on node (\S+?) exited on signal (\d+)`)
	// "... detected that one or more processes exited with non-zero status"
	nonZeroRe  = regexp.MustCompile(`detected that one or more processes exited with non-zero status`)
	procNameRe = regexp.MustCompile(`Process name:\s*\[(?:\[[^\]]*\]|[^\],\[]*),\s*(\d+)\]`)
	exitCodeRe = regexp.MustCompile(`Exit code:\s*(-?\d+)`)
	// "ORTE has lost communication with a remote daemon." / PRRTE's "lost communication with"
	lostRe         = regexp.MustCompile(`lost communication with (?:a )?remote daemon`)
	remoteDaemonRe = regexp.MustCompile(`Remote daemon:.*\bon node (\S+)`)
	// "An ORTE daemon has unexpectedly failed after launch", "ORTE was unable to reliably start one or more daemons"
	daemonFailedRe = regexp.MustCompile(`daemon has unexpectedly failed after launch|unable to reliably start one or more daemons|PRTE has lost communication with a remote daemon|daemon on node (\S+) failed to start`)
	// Hydra (MPICH, Intel MPI): a block of "=   " lines.
	badTermRe    = regexp.MustCompile(`BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES`)
	hydraPIDRe   = regexp.MustCompile(`PID (\d+) RUNNING AT (\S+)`)
	hydraCodeRe  = regexp.MustCompile(`EXIT CODE: (-?\d+)`)
	hydraExitStr = regexp.MustCompile(`EXIT STRING: .*\(signal (\d+)\)`)
)

// Collector gathers Reports from mpirun's output streams. Its methods are
// safe for concurrent use.
type Collector struct {
	now func() time.Time

	mu      sync.Mutex
	reports []Report
	dropped int
}

// NewCollector returns an empty collector; now nil means time.Now.
func NewCollector(now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{now: now}
}

// Reports returns what was collected so far, in the order it was printed.
func (c *Collector) Reports() []Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Report(nil), c.reports...)
}

func (c *Collector) add(r Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reports) >= maxReports {
		c.dropped++
		return
	}
	c.reports = append(c.reports, r)
}

// Writer returns a writer that passes every byte to w unchanged, at once
// (one Write to w per Write), and scans the complete lines for mpirun's
// failure messages. Use one per stream: each keeps its own partial line.
func (c *Collector) Writer(w io.Writer) io.Writer {
	return &scanWriter{w: w, c: c}
}

type scanWriter struct {
	w io.Writer
	c *Collector

	mu      sync.Mutex
	line    []byte
	skip    bool // the current line is longer than maxLine: drop its rest
	pending *pending
}

// pending is a multi-line message whose details are still to come.
type pending struct {
	r    Report
	left int // lines it may still take
	// follow reads one more line into r and reports whether the message
	// is complete.
	follow func(p *pending, line string) bool
}

func (s *scanWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range p[:n] {
		if b == '\n' {
			if !s.skip || len(s.line) > 0 {
				s.scan(string(s.line))
			}
			s.line, s.skip = s.line[:0], false
			continue
		}
		if s.skip {
			continue
		}
		if len(s.line) >= maxLine {
			s.scan(string(s.line))
			s.line, s.skip = s.line[:0], true
			continue
		}
		s.line = append(s.line, b)
	}
	return n, err
}

// scan looks at one line.
func (s *scanWriter) scan(line string) {
	line = strings.TrimRight(line, "\r")
	if p := s.pending; p != nil {
		complete := p.follow(p, line)
		p.left--
		if complete || p.left <= 0 {
			s.c.add(p.r)
			s.pending = nil
		}
		if complete {
			return
		}
	}
	now := s.c.now()
	switch {
	case noticedRe.MatchString(line):
		m := noticedRe.FindStringSubmatch(line)
		s.c.add(Report{Time: now, Kind: ReportSignal, Rank: atoi(m[1], -1), PID: atoi(m[2], 0), Host: m[3], Signal: atoi(m[4], 0),
			ExitCode: -1, Line: strings.TrimSpace(line)})
	case nonZeroRe.MatchString(line):
		s.start(Report{Time: now, Kind: ReportExit, Rank: -1, ExitCode: -1, Line: strings.TrimSpace(line)}, func(p *pending, l string) bool {
			if m := procNameRe.FindStringSubmatch(l); m != nil {
				p.r.Rank = atoi(m[1], -1)
			}
			if m := exitCodeRe.FindStringSubmatch(l); m != nil {
				p.r.ExitCode = atoi(m[1], -1)
			}
			return p.r.Rank >= 0 && p.r.ExitCode >= 0
		})
	case lostRe.MatchString(line):
		s.start(Report{Time: now, Kind: ReportDaemonLost, Rank: -1, ExitCode: -1, Line: strings.TrimSpace(line)}, func(p *pending, l string) bool {
			if m := remoteDaemonRe.FindStringSubmatch(l); m != nil {
				p.r.Host = m[1]
				return true
			}
			return false
		})
	case daemonFailedRe.MatchString(line):
		m := daemonFailedRe.FindStringSubmatch(line)
		s.c.add(Report{Time: now, Kind: ReportDaemonFailed, Rank: -1, ExitCode: -1, Host: m[1], Line: strings.TrimSpace(line)})
	case badTermRe.MatchString(line):
		s.start(Report{Time: now, Kind: ReportExit, Rank: -1, ExitCode: -1, Line: strings.TrimSpace(line)}, func(p *pending, l string) bool {
			if m := hydraPIDRe.FindStringSubmatch(l); m != nil {
				p.r.PID, p.r.Host = atoi(m[1], 0), m[2]
			}
			if m := hydraCodeRe.FindStringSubmatch(l); m != nil {
				p.r.ExitCode = atoi(m[1], -1)
			}
			if m := hydraExitStr.FindStringSubmatch(l); m != nil {
				// Hydra's EXIT CODE is then the signal number.
				p.r.Kind, p.r.Signal, p.r.ExitCode = ReportSignal, atoi(m[1], 0), -1
				return true
			}
			return false
		})
	}
}

// start begins a multi-line message; an unfinished one is kept as it is.
func (s *scanWriter) start(r Report, follow func(*pending, string) bool) {
	if s.pending != nil {
		s.c.add(s.pending.r)
	}
	s.pending = &pending{r: r, left: maxFollow, follow: follow}
}

// Flush reports an unfinished multi-line message (at the end of the output).
func (c *Collector) Flush(w io.Writer) {
	s, ok := w.(*scanWriter)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.line) > 0 && !s.skip {
		s.scan(string(s.line))
		s.line = s.line[:0]
	}
	if s.pending != nil {
		c.add(s.pending.r)
		s.pending = nil
	}
}

func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
