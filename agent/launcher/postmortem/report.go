package postmortem

import (
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podmpi/podmpi/mpi"
)

// Report kinds: what mpirun said about a failed process or daemon, or
// about where a rank runs.
const (
	// ReportSignal: a rank died of a signal (Open MPI/PRRTE "noticed that
	// process rank R ... exited on signal N", Hydra's "BAD TERMINATION"
	// block, a signal in Hydra's list of exit codes).
	ReportSignal = "signal"
	// ReportExit: a rank exited with a non-zero status (Open MPI/PRRTE
	// "The first process to do so was: Process name ... Exit code: C",
	// a non-zero status in Hydra's list of exit codes).
	ReportExit = "exit"
	// ReportDaemonLost: mpirun lost its connection to a remote daemon.
	ReportDaemonLost = "daemon-lost"
	// ReportDaemonFailed: a remote daemon failed to start or to call back.
	ReportDaemonFailed = "daemon-failed"
	// ReportPlaced: where a rank runs, in the words of the MPI daemon that
	// started it there (Open MPI's report of each rank's binding,
	// "[w-0:4242] MCW rank 3 is not bound ..."): no failure, evidence of
	// the host of a rank another message names without one. The collector
	// keeps these apart (Collector.Placed), one host name per rank.
	ReportPlaced = "placed"
)

// Report is one failure mpirun printed, as read from its output.
type Report struct {
	Time time.Time
	Kind string
	// Rank, PID, Host: -1, 0 and "" when the message does not say.
	Rank int
	PID  int
	Host string
	// Signal is the signal number of a ReportSignal (CoreDumped when the
	// MPI says it dumped core); ExitCode the status of a ReportExit (-1
	// otherwise).
	Signal     int
	CoreDumped bool
	ExitCode   int
	// Hydra is true for Hydra's words (MPICH, Intel MPI).
	Hydra bool
	// Listed is true for an entry of Hydra's list of every process's exit
	// status, by host, which mpiexec prints as it ends
	// (-print-all-exitcodes): no rank, no PID, and no order in time.
	Listed bool
	// Line is mpirun's line that said it.
	Line string
}

// Asked is what the launcher asked mpirun to print for the diagnosis on
// top of what the command asks for (mpirun.Asked): the collector reads
// those lines like the rest and leaves them out of what it passes on, so
// that the job's output is what the user's command would have printed.
type Asked struct {
	// Bindings: Open MPI's report of each rank's binding, one line per
	// rank by the daemon that starts it ("[w-0:4242] MCW rank 3 is not
	// bound (or bound to all available processors)", Open MPI 5's
	// "[w-0:4242] Rank 3 bound to package[0][core:0]").
	Bindings bool
	// ExitCodes: Hydra's list of every process's exit status by host,
	// printed as mpiexec ends ("[mpiexec@l] Exit codes: [w-0] 0,1280").
	ExitCodes bool
}

func (a Asked) any() bool { return a.Bindings || a.ExitCodes }

// maxLine bounds the part of one output line that is scanned; longer lines
// pass through whole but are scanned only up to it.
const maxLine = 4096

// maxReports bounds the reports kept.
const maxReports = 256

// maxPlaced bounds the ranks whose reported hosts are kept (a job with
// more ranks has the rest unplaced).
const maxPlaced = 1 << 16

// maxFollow is how many lines after a message's first line its details may
// come on.
const maxFollow = 12

var (
	// Open MPI 4 (mpirun, orterun) and 5 (prterun):
	// "mpirun noticed that process rank 1 with PID 0 on node w-0 exited on signal 11 (Segmentation fault)."
	// PRRTE breaks the line after "exited on": "signal 9 (Killed)." follows.
	noticedRe    = regexp.MustCompile(`\S+ noticed that process rank (\d+) with PID (\d+) on node (\S+?) exited on(?: signal (\d+))?`)
	signalLineRe = regexp.MustCompile(`^\s*signal (\d+)`)
	coreDumpedRe = regexp.MustCompile(`core dumped`)
	// "... detected that one or more processes exited with non-zero status"
	nonZeroRe  = regexp.MustCompile(`detected that one or more processes exited with non-zero status`)
	procNameRe = regexp.MustCompile(`Process name:\s*\[(?:\[[^\]]*\]|[^\],\[]*),\s*(\d+)\]`)
	exitCodeRe = regexp.MustCompile(`Exit code:\s*(-?\d+)`)
	// "ORTE has lost communication with a remote daemon." / PRRTE's "lost communication with"
	lostRe         = regexp.MustCompile(`lost communication with (?:a )?remote daemon`)
	remoteDaemonRe = regexp.MustCompile(`Remote daemon:.*\bon node (\S+)`)
	// "An ORTE daemon has unexpectedly failed after launch", "ORTE was unable to reliably start one or more daemons"
	daemonFailedRe = regexp.MustCompile(`daemon has unexpectedly failed after launch|unable to reliably start one or more daemons|PRTE has lost communication with a remote daemon|daemon on node (\S+) failed to start`)
	// Open MPI's report of a rank's binding, by the daemon that starts it
	// (4: "MCW rank 3 ...", 5: "Rank 3 ..."), behind its own host name.
	bindingRe = regexp.MustCompile(`\[([^\[\]\s:]+):\d+\] (?:MCW rank|Rank) (\d+) (?:is not bound|bound to)`)
	// Hydra (MPICH, Intel MPI): a block of "=   " lines. MPICH (3.2 and
	// later) prints it for the first process a signal ended, with its
	// wait status as "EXIT CODE" (the signal, plus 128 when it dumped
	// core); Intel MPI for every rank a signal ended, with its rank.
	badTermRe     = regexp.MustCompile(`BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES`)
	hydraPIDRe    = regexp.MustCompile(`(?:RANK (\d+) )?PID (\d+) RUNNING AT (\S+)`)
	hydraCodeRe   = regexp.MustCompile(`EXIT CODE: (-?\d+)`)
	hydraSignalRe = regexp.MustCompile(`KILLED BY SIGNAL: (\d+)`)
	// Hydra's list of exit codes (-print-all-exitcodes): the header with
	// the first host's entry, then a line per host. MPICH names the host
	// ("[w-0] 0,1280"), Intel MPI the host and a node index ("[w-0:1] 0,5").
	exitCodesRe      = regexp.MustCompile(`^\[mpiexec@[^\]\s]*\] Exit codes: ?(.*)$`)
	exitCodesEntryRe = regexp.MustCompile(`^\[([^\]\s]+?)(?::(\d+))?\] (-?\d+(?:,-?\d+)*)$`)
)

// Collector gathers Reports from mpirun's output streams. Its methods are
// safe for concurrent use.
type Collector struct {
	now func() time.Time

	mu      sync.Mutex
	impl    mpi.Implementation
	asked   Asked
	reports []Report
	dropped int
	// placed is each rank's hosts as the MPI reported it starting (two at
	// most: more than one is a contradiction); names keeps one copy of
	// each host name.
	placed map[int][]string
	names  map[string]string
	// matched marks the Hydra blocks an entry of its list of exit codes
	// was found to repeat.
	matched map[int]bool
}

// NewCollector returns an empty collector; now nil means time.Now.
func NewCollector(now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{now: now, matched: map[int]bool{}, placed: map[int][]string{}, names: map[string]string{}}
}

// Expect tells the collector which MPI prints the output it reads (how
// Hydra's list of exit codes counts depends on it) and what the launcher
// asked that MPI to print, which the writers then leave out. Call it
// before mpirun starts.
func (c *Collector) Expect(impl mpi.Implementation, asked Asked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.impl, c.asked = impl, asked
}

func (c *Collector) expected() (mpi.Implementation, Asked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.impl, c.asked
}

// Reports returns what was collected so far, in the order it was printed,
// but for the reports of where ranks started (Placed).
func (c *Collector) Reports() []Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Report(nil), c.reports...)
}

// Placed returns the hosts each rank was reported starting on, by rank:
// one, or two when reports contradict each other.
func (c *Collector) Placed() map[int][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int][]string, len(c.placed))
	for r, hs := range c.placed {
		out[r] = slices.Clone(hs)
	}
	return out
}

func (c *Collector) add(r Report) {
	if r.Hydra && r.Kind == ReportSignal && r.Signal <= 0 {
		return // a block that never said which signal
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Kind == ReportPlaced {
		hs, ok := c.placed[r.Rank]
		if r.Rank < 0 || !ok && len(c.placed) >= maxPlaced || len(hs) >= 2 || slices.ContainsFunc(hs, func(h string) bool { return strings.EqualFold(h, r.Host) }) {
			return
		}
		name, ok := c.names[r.Host]
		if !ok {
			name = r.Host
			c.names[name] = name
		}
		c.placed[r.Rank] = append(hs, name)
		return
	}
	if r.Listed && r.Kind == ReportSignal {
		// MPICH's block names the first process a signal ended; its list
		// names it again, without the PID.
		for i, b := range c.reports {
			if b.Hydra && !b.Listed && b.Kind == ReportSignal && !c.matched[i] && b.Signal == r.Signal && strings.EqualFold(b.Host, r.Host) {
				c.matched[i] = true
				return
			}
		}
	}
	if len(c.reports) >= maxReports {
		c.dropped++
		return
	}
	c.reports = append(c.reports, r)
}

// Writer returns a writer that passes what it is given to w and scans the
// complete lines for mpirun's failure messages and its reports of where
// ranks run. Use one per stream: each keeps its own partial line. Until
// Expect says the launcher asked mpirun for lines of its own, every byte
// passes at once (one Write to w per Write); after, a line that may be one of
// them is held until it is known (for a binding report, once
// its first words are read; for Hydra's list of exit codes, at its end),
// and dropped if it is: any other line passes as soon as it differs.
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
	// codes is true after a line of Hydra's list of exit codes: the next
	// line may be another.
	codes bool

	// What passes, when the launcher asked mpirun for lines of its own.
	state lineState
	held  []byte // the current line's bytes held back while undecided
	out   []byte // what this Write passes on
}

// lineState is what happens to the current line's bytes.
type lineState int

const (
	lineStart lineState = iota // no byte of it yet
	linePass                   // not one of the launcher's: its bytes pass
	lineHold                   // may be one: held until it is known
	lineDrop                   // one of the launcher's: dropped to its end
)

// pending is a multi-line message whose details are still to come.
type pending struct {
	r    Report
	left int // lines it may still take
	// follow reads one more line into r and reports whether the message
	// is complete.
	follow func(p *pending, line string) bool
}

func (s *scanWriter) Write(p []byte) (int, error) {
	impl, asked := s.c.expected()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !asked.any() && s.state != lineHold {
		n, err := s.w.Write(p)
		for _, b := range p[:n] {
			s.consume(b, impl)
		}
		return n, err
	}
	s.out = s.out[:0]
	for _, b := range p {
		s.filter(b, asked)
		s.consume(b, impl)
	}
	if len(s.out) == 0 {
		return len(p), nil
	}
	if _, err := s.w.Write(s.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// filter decides what happens to b, the next byte of the output, and
// appends what passes to s.out.
func (s *scanWriter) filter(b byte, asked Asked) {
	switch s.state {
	case lineStart:
		if b != '[' {
			s.out = append(s.out, b)
			if b != '\n' {
				s.state = linePass
			}
			return
		}
		s.state, s.held = lineHold, append(s.held[:0], b)
	case linePass:
		s.out = append(s.out, b)
	case lineDrop:
	case lineHold:
		if b == '\n' {
			if !askedLine(string(s.held), asked, s.codes) {
				s.out = append(append(s.out, s.held...), b)
			}
			s.held = s.held[:0]
			break
		}
		s.held = append(s.held, b)
	}
	if b == '\n' {
		s.state = lineStart
		return
	}
	if s.state != lineHold {
		return
	}
	switch full, partial := heldMatch(s.held, asked, s.codes); {
	case full == bindingHead:
		s.state, s.held = lineDrop, s.held[:0]
	case (full == wholeLine || partial) && len(s.held) < maxLine:
	default:
		s.out = append(s.out, s.held...)
		s.state, s.held = linePass, s.held[:0]
	}
}

// consume scans b, the next byte of the output.
func (s *scanWriter) consume(b byte, impl mpi.Implementation) {
	if b == '\n' {
		if !s.skip || len(s.line) > 0 {
			s.scan(string(s.line), impl)
		}
		s.line, s.skip = s.line[:0], false
		return
	}
	if s.skip {
		return
	}
	if len(s.line) >= maxLine {
		s.scan(string(s.line), impl)
		s.line, s.skip = s.line[:0], true
		return
	}
	s.line = append(s.line, b)
}

// scan looks at one line.
func (s *scanWriter) scan(line string, impl mpi.Implementation) {
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
	codes := s.codes
	s.codes = false
	now := s.c.now()
	switch {
	case codes && exitCodesEntryRe.MatchString(line):
		s.exitCodes(line, line, impl, now)
	case exitCodesRe.MatchString(line):
		s.exitCodes(exitCodesRe.FindStringSubmatch(line)[1], line, impl, now)
	case bindingRe.MatchString(line):
		m := bindingRe.FindStringSubmatch(line)
		s.c.add(Report{Time: now, Kind: ReportPlaced, Rank: atoi(m[2], -1), Host: m[1], ExitCode: -1, Line: strings.TrimSpace(line)})
	case noticedRe.MatchString(line):
		m := noticedRe.FindStringSubmatch(line)
		r := Report{Time: now, Kind: ReportSignal, Rank: atoi(m[1], -1), PID: atoi(m[2], 0), Host: m[3], Signal: atoi(m[4], 0),
			CoreDumped: coreDumpedRe.MatchString(line), ExitCode: -1, Line: strings.TrimSpace(line)}
		if m[4] != "" {
			s.c.add(r)
			break
		}
		s.start(r, func(p *pending, l string) bool {
			if m := signalLineRe.FindStringSubmatch(l); m != nil {
				p.r.Signal, p.r.CoreDumped = atoi(m[1], 0), coreDumpedRe.MatchString(l)
				p.r.Line += " " + strings.TrimSpace(l)
			}
			return true // the signal comes on the next line or not at all
		})
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
		// Complete once a signal is known; a block without one (MPICH
		// before 3.2 printed it for exit statuses too) is left out.
		s.start(Report{Time: now, Kind: ReportSignal, Rank: -1, ExitCode: -1, Hydra: true, Line: strings.TrimSpace(line)}, func(p *pending, l string) bool {
			if m := hydraPIDRe.FindStringSubmatch(l); m != nil {
				p.r.Rank, p.r.PID, p.r.Host = atoi(m[1], -1), atoi(m[2], 0), m[3]
			}
			if m := hydraCodeRe.FindStringSubmatch(l); m != nil {
				p.r.Signal, p.r.CoreDumped = waitSignal(atoi(m[1], 0))
			}
			if m := hydraSignalRe.FindStringSubmatch(l); m != nil {
				p.r.Signal = atoi(m[1], 0)
			}
			return p.r.Signal > 0
		})
	}
}

// start begins a multi-line message; an unfinished one is kept as it is,
// unless it is a Hydra block that never gave its signal.
func (s *scanWriter) start(r Report, follow func(*pending, string) bool) {
	if s.pending != nil {
		s.c.add(s.pending.r)
	}
	s.pending = &pending{r: r, left: maxFollow, follow: follow}
}

// exitCodes reads entries of Hydra's list of exit codes ("[w-0] 0,1280"):
// a report for each process that did not exit with status 0. MPICH lists
// each wait status as waitpid gave it (1280 is exit(5), 9 SIGKILL, 139
// SIGSEGV with a core dump), Intel MPI a status as a shell counts it (5,
// and 128+N for signal N).
func (s *scanWriter) exitCodes(entries, line string, impl mpi.Implementation, now time.Time) {
	s.codes = true
	m := exitCodesEntryRe.FindStringSubmatch(entries)
	if m == nil {
		return
	}
	shell := impl == mpi.IntelMPI || impl != mpi.MPICH && m[2] != ""
	for _, v := range strings.Split(m[3], ",") {
		code := atoi(v, 0)
		if code == 0 {
			continue
		}
		r := Report{Time: now, Kind: ReportExit, Rank: -1, Host: m[1], ExitCode: code, Hydra: true, Listed: true, Line: strings.TrimSpace(line)}
		switch {
		case shell && code > 128 && code < 128+65:
			r.Kind, r.Signal, r.ExitCode = ReportSignal, code-128, -1
		case shell:
		case code&0x7f == 0:
			r.ExitCode = code >> 8 & 0xff
		default:
			r.Kind, r.ExitCode = ReportSignal, -1
			r.Signal, r.CoreDumped = waitSignal(code)
		}
		s.c.add(r)
	}
}

// waitSignal is the signal of a wait status that says a signal ended the
// process, and whether it dumped core.
func waitSignal(status int) (int, bool) {
	return status & 0x7f, status&0x80 != 0
}

// Flush reports an unfinished multi-line message and passes on a line held
// back (at the end of the output).
func (c *Collector) Flush(w io.Writer) {
	s, ok := w.(*scanWriter)
	if !ok {
		return
	}
	impl, _ := c.expected()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == lineHold && len(s.held) > 0 {
		_, _ = s.w.Write(s.held)
	}
	s.state, s.held = lineStart, s.held[:0]
	if len(s.line) > 0 && !s.skip {
		s.scan(string(s.line), impl)
		s.line = s.line[:0]
	}
	if s.pending != nil {
		c.add(s.pending.r)
		s.pending = nil
	}
}

// headKind is what the start of a held line shows it to be.
type headKind int

const (
	noHead      headKind = iota
	bindingHead          // a binding report: dropped from here to its end
	wholeLine            // maybe a line of Hydra's list: known at its end
)

// token is one step of a head: a literal, or a run of bytes of a class
// (at least one; with rest, every byte to the end of what is held).
type token struct {
	lit   string
	class func(byte) bool
	rest  bool
}

// head is the start of a line the launcher asked mpirun for.
type head []token

// match reports whether b starts with h (full), or could still grow into
// a line that does (partial).
func (h head) match(b []byte) (full, partial bool) {
	i := 0
	for _, t := range h {
		switch {
		case t.class == nil:
			for j := 0; j < len(t.lit); j++ {
				if i == len(b) {
					return false, true
				}
				if b[i] != t.lit[j] {
					return false, false
				}
				i++
			}
		case t.rest:
			for ; i < len(b); i++ {
				if !t.class(b[i]) {
					return false, false
				}
			}
		default:
			n := 0
			for i < len(b) && t.class(b[i]) {
				i, n = i+1, n+1
			}
			if i == len(b) {
				return false, true
			}
			if n == 0 {
				return false, false
			}
		}
	}
	return true, false
}

func lit(s string) token               { return token{lit: s} }
func run(class func(byte) bool) token  { return token{class: class} }
func rest(class func(byte) bool) token { return token{class: class, rest: true} }
func isDigit(b byte) bool              { return b >= '0' && b <= '9' }
func isLower(b byte) bool              { return b >= 'a' && b <= 'z' }
func isCode(b byte) bool               { return isDigit(b) || b == ',' || b == '-' }
func isName(b byte) bool               { return b > ' ' && b != '[' && b != ']' && b != 0x7f }
func isHostName(b byte) bool           { return isName(b) && b != ':' }

// bindingHeads are the starts of Open MPI's binding reports, with and
// without --tag-output's "[1,3]<stderr>:" in front.
var bindingHeads = func() []head {
	var out []head
	for _, tag := range [][]token{nil, {lit("["), run(isDigit), lit(","), run(isDigit), lit("]<"), run(isLower), lit(">:")}} {
		for _, who := range []string{"] MCW rank ", "] Rank "} {
			for _, what := range []string{" is not bound", " bound to"} {
				h := append(append(head{}, tag...), lit("["), run(isHostName), lit(":"), run(isDigit), lit(who), run(isDigit), lit(what))
				out = append(out, h)
			}
		}
	}
	return out
}()

var (
	// The first line of Hydra's list of exit codes, and the ones after.
	codesHead      = head{lit("[mpiexec@"), run(isName), lit("] Exit codes:")}
	codesEntryHead = head{lit("["), run(isName), lit("] "), rest(isCode)}
)

// heldMatch tells what the held start of a line b is, of the lines the
// launcher asked for, and whether it may still become one; codes is true
// right after a line of Hydra's list.
func heldMatch(b []byte, asked Asked, codes bool) (headKind, bool) {
	partial := false
	if asked.Bindings {
		for _, h := range bindingHeads {
			full, part := h.match(b)
			if full {
				return bindingHead, false
			}
			partial = partial || part
		}
	}
	if asked.ExitCodes {
		hs := []head{codesHead}
		if codes {
			hs = append(hs, codesEntryHead)
		}
		for _, h := range hs {
			full, part := h.match(b)
			if full {
				return wholeLine, false
			}
			partial = partial || part
		}
	}
	return noHead, partial
}

// askedLine reports whether a whole line that was held to its end is one
// the launcher asked for: a line of Hydra's list of exit codes.
func askedLine(line string, asked Asked, codes bool) bool {
	line = strings.TrimRight(line, "\r")
	if !asked.ExitCodes {
		return false
	}
	if m := exitCodesRe.FindStringSubmatch(line); m != nil {
		return m[1] == "" || exitCodesEntryRe.MatchString(m[1])
	}
	return codes && exitCodesEntryRe.MatchString(line)
}

func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
